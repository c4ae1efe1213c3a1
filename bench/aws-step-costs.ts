/**
 * AWS calls, capacity and bytes per step of a 60-step run through the SQS worker handler, against
 * DynamoDB Local and fauxqs (started here unless AWS_ENDPOINT_URL_* already point at servers). Every
 * SDK call is counted by a middleware on the clients: the worker's (handler) and the event source's
 * (receives and deletes, which Lambda's SQS trigger makes in production). Then the resume read's capacity
 * at steps 1, 60, 200, 300 and 600 of a second, 600-step run: warm (the handler of a container that ran the
 * earlier steps and holds them in its step cache), one step behind, and cold (a fresh container, empty
 * cache: the block summaries and the records after them), next to the old cold read (head + every record).
 * Figures, not assertions.
 *
 *   node --import tsx bench/aws-step-costs.ts [steps] [resume-read steps]
 */
import { QueryCommand } from '@aws-sdk/client-dynamodb';
import { decodeState } from '../lib/core/codec.ts';
import { HEAD_SK, checkpointSk, runPk, stepSk } from '../lib/aws/table-layout.ts';
import { createAwsClients } from '../lib/aws/clients.ts';
import { countCommands, countReadUnits, createTestResources, queueDepth, startTestRun, type TestResources } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { benchAgent, perStep, rawItemSize } from './aws-support.ts';

const STEPS = Number(process.argv[2] ?? 60);
const READ_STEPS = Number(process.argv[3] ?? 600);
const READ_AT = [1, 60, 200, 300, 600].filter((n) => n <= READ_STEPS);
const LARGE_EVERY = 10;

type Stack = { add(middleware: unknown, options: unknown): void };
interface Counter { calls: Map<string, number>; wcu: number; rcu: number; commitWcu: Map<number, number> }

/** Counts commands (DynamoDB ones by what they touch) and the capacity DynamoDB reports for them. */
function instrument(stack: Stack, counter: Counter, service: string): void {
  stack.add(
    (next: (args: { input: Record<string, any> }) => Promise<{ output: Record<string, any> }>, context: { commandName?: string }) => async (args: { input: Record<string, any> }) => {
      const name = (context.commandName ?? 'unknown').replace(/Command$/, '');
      // The document client shares this stack, so inputs arrive as native values (or wire format).
      const pk = args.input.Key?.pk ?? args.input.Item?.pk;
      const key = String(pk?.S ?? pk ?? '');
      const label = `${service} ${name}${key.startsWith('idem#') ? ' (ledger)' : ''}`;
      counter.calls.set(label, (counter.calls.get(label) ?? 0) + 1);
      if (service === 'DynamoDB') args.input.ReturnConsumedCapacity = 'TOTAL';
      const result = await next(args);
      const consumed = [result.output.ConsumedCapacity ?? []].flat() as { WriteCapacityUnits?: number; ReadCapacityUnits?: number; CapacityUnits?: number }[];
      const isWrite = /Put|Update|Delete|TransactWrite/.test(name);
      for (const c of consumed) {
        const units = c.CapacityUnits ?? (isWrite ? c.WriteCapacityUnits : c.ReadCapacityUnits) ?? 0;
        if (isWrite) counter.wcu += units;
        else counter.rcu += units;
        if (name === 'TransactWriteItems') {
          const step = /"sk":(?:\{"S":)?"s#0*(\d+)"/.exec(JSON.stringify(args.input))?.[1];
          if (step) counter.commitWcu.set(Number(step), units);
        }
      }
      return result;
    },
    { step: 'initialize', name: `bench-count-${service}-${Math.random()}` },
  );
}

const stopServers = await useAwsServers();
const resources = await createTestResources('bench-costs');
try {
  const { agent, model } = benchAgent({ steps: STEPS, largeEvery: LARGE_EVERY, largeBytes: 20_000 });
  const runtime = resources.runtime();
  const runId = await startTestRun(runtime, agent, 'bench-costs-run', `take ${STEPS} steps`);
  const counter: Counter = { calls: new Map(), wcu: 0, rcu: 0, commitWcu: new Map() };
  instrument(resources.clients.sqs.middlewareStack as Stack, counter, 'SQS (event source)');
  const { workers } = await driveRun({
    resources, runId, maxPolls: STEPS * 3,
    spawn: () => {
      const worker = new WorkerProcess({ resources, agent, model: model() });
      instrument(worker.clients.dynamo.middlewareStack as Stack, counter, 'DynamoDB');
      instrument(worker.clients.sqs.middlewareStack as Stack, counter, 'SQS (handler)');
      instrument(worker.clients.s3.middlewareStack as Stack, counter, 'S3');
      return worker;
    },
  });
  const state = decodeState((await runtime.store.load(runId))!);
  // The queue-empty checks of the driver are bench plumbing, not a step's cost.
  counter.calls.delete('SQS (event source) GetQueueAttributes');
  const invocations = STEPS + 1; // 60 steps and the final DONE, one message each

  console.log(`run: ${state.status} after ${state.step} steps in ${workers.length} container(s); ${invocations} handler invocations`);
  console.log(`\nAWS calls per invocation (one step each), ${invocations} invocations:`);
  for (const [label, count] of [...counter.calls].sort()) console.log(`  ${label.padEnd(44)} ${String(count).padStart(5)}  ${perStep(count, invocations)} / step`);
  const sum = (re: RegExp) => [...counter.calls].filter(([l]) => re.test(l)).reduce((n, [, c]) => n + c, 0);
  console.log('\nper step, against the target (<= 1 DynamoDB read, <= 2 writes, 1 SQS send, 1 delete; S3 only for large outputs):');
  console.log(`  DynamoDB reads                 ${perStep(sum(/^DynamoDB (Query|GetItem)/), invocations)}`);
  console.log(`  DynamoDB writes, checkpoints   ${perStep(sum(/^DynamoDB (TransactWriteItems|UpdateItem|PutItem|DeleteItem)$/), invocations)}   (1 transaction per step, +1 UpdateItem in the ${Math.ceil(STEPS / 2)} side-effecting steps: the recorded decision)`);
  console.log(`  DynamoDB writes, ledger        ${perStep(sum(/\(ledger\)/), invocations)}   (claim + complete, only in the ${Math.ceil(STEPS / 2)} steps whose tool calls ctx.once)`);
  console.log(`    => a read-only step: 1 read + 1 write; a side-effecting step: 1 read + 2 checkpoint writes + 2 ledger writes`);
  console.log(`  SQS sends                      ${perStep(sum(/SendMessage/), invocations)}`);
  console.log(`  SQS receives (event source)    ${perStep(sum(/ReceiveMessage/), invocations)}`);
  console.log(`  SQS deletes (event source)     ${perStep(sum(/DeleteMessage/), invocations)}`);
  console.log(`  S3 puts                        ${perStep(sum(/PutObject/), invocations)}   (${sum(/PutObject/)} puts: the ${Math.floor(STEPS / LARGE_EVERY)} outputs of 20 KB; every other output is inline)`);
  console.log(`  consumed capacity              ${perStep(counter.wcu, invocations)} WCU, ${perStep(counter.rcu, invocations)} RCU per step (DynamoDB Local's accounting; transactions count 2x)`);

  const { Items = [] } = await resources.clients.dynamo.send(new QueryCommand({
    TableName: resources.tableName, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: runPk(runId) } }, ConsistentRead: true,
  }));
  const size = (sk: string) => rawItemSize(Items.find((i) => i.sk?.S === sk) ?? {});
  const history = await runtime.store.history(runId);
  const versionOf = (step: number) => history.find((h) => h.step === step && h.tool)!.version;
  const head = size(HEAD_SK);
  console.log('\nDynamoDB bytes written by a step (its record + its history row + the head it rewrites):');
  for (const step of [1, 2, STEPS - 1, STEPS - 2, STEPS]) {
    const record = size(stepSk(step));
    const row = size(checkpointSk(versionOf(step)));
    const kind = step % 2 ? 'write_row' : step % LARGE_EVERY ? 'read_rows' : 'read_rows, 20 KB output by ref';
    console.log(`  step ${String(step).padStart(2)} (${kind}): ${record + row + head} bytes = record ${record} + history row ${row} + head ${head}; commit ${counter.commitWcu.get(step) ?? '?'} WCU`);
  }
  const largest = Items.map((i) => ({ sk: i.sk?.S ?? '', bytes: rawItemSize(i) })).sort((a, b) => b.bytes - a.bytes)[0]!;
  console.log(`  largest item: ${largest.sk} at ${largest.bytes} bytes (limit 409600); ${Items.length} items in the run's partition`);

  await resumeReads(resources);
} finally {
  resources.close();
  await stopServers();
}

/**
 * The resume read of step n: warm, it is the whole read of the handler invocation that runs step n in the
 * container that ran steps 1..n-1 (so it holds them); cold and one step behind, it is the load that a
 * container with an empty cache, or holding steps 1..n-2, makes (store.load on fresh clients, the exact call
 * advance() makes there), taken just before the warm invocation.
 */
async function resumeReads(resources: TestResources): Promise<void> {
  const { agent, model } = benchAgent({ steps: READ_STEPS, largeEvery: LARGE_EVERY, largeBytes: 20_000 });
  const runId = await startTestRun(resources.runtime(), agent, 'bench-reads-run', `take ${READ_STEPS} steps`);
  const warm = new WorkerProcess({ resources, agent, model: model() });
  const warmUnits = countReadUnits(warm.clients.dynamo);
  const warmCalls = countCommands(warm.clients.dynamo);
  const fresh = createAwsClients();
  const freshStore = resources.runtime({ clients: fresh }).store;
  const freshUnits = countReadUnits(fresh.dynamo);
  const freshCalls = countCommands(fresh.dynamo);
  const reads = (calls: Map<string, number>) => [...calls].filter(([name]) => /^(Get|Query|BatchGet)/.test(name))
    .map(([name, count]) => `${count} ${name.replace(/(Item)?Command$/, '')}`).join(' + ');
  const measure = async (units: { units: number }, calls: Map<string, number>, read: () => Promise<unknown>) => {
    units.units = 0;
    calls.clear();
    await read();
    return { units: units.units, calls: reads(calls) };
  };
  const rows: string[] = [];
  let total = 0;
  try {
    // One message per invocation: the n-th invocation runs step n (the last one, the model's DONE).
    for (let n = 1; n <= READ_STEPS + 1; n++) {
      const measured = READ_AT.includes(n);
      const cold = measured ? await measure(freshUnits, freshCalls, () => freshStore.load(runId, { recent: true })) : undefined;
      const all = measured ? await measure(freshUnits, freshCalls, () => freshStore.load(runId)) : undefined;
      const behind = measured && n > 2 ? await measure(freshUnits, freshCalls, () => freshStore.load(runId, { afterStep: n - 2 })) : undefined;
      const invocation = await measure(warmUnits, warmCalls, async () => {
        const poll = await pollOnce(resources.clients, resources.queueUrl, warm, { max: 1 });
        if (poll.records.length !== 1 || poll.failures.length) throw new Error(`step ${n}: ${poll.records.length} records, ${poll.failures.length} failures`);
      });
      total += invocation.units;
      if (cold) {
        const cell = (m: { units: number; calls: string } | undefined) => (m ? `${m.units} RCU (${m.calls})` : 'n/a').padEnd(26);
        rows.push(`  step ${String(n).padStart(3)}   ${cell(invocation)} ${cell(behind)} ${cell(cold)} ${cell(all)}`);
      }
    }
    if ((await queueDepth(resources.clients, resources.queueUrl)) !== 0) throw new Error('the run left messages behind');
  } finally {
    warm.close();
    fresh.destroy();
  }
  console.log(`\nresume read per step, ${READ_STEPS}-step run (same agent; DynamoDB Local's capacity accounting, strongly consistent):`);
  console.log(`             ${'warm (handler)'.padEnd(26)} ${'one step behind'.padEnd(26)} ${'cold (empty cache)'.padEnd(26)} ${'old cold (every record)'.padEnd(26)}`);
  for (const row of rows) console.log(row);
  console.log(`  whole run, warm container: ${total} RCU for ${READ_STEPS + 1} invocations (${perStep(total, READ_STEPS + 1)} per step)`);
}
