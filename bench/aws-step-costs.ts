/**
 * AWS calls, capacity and bytes per step of a 60-step run through the SQS worker handler, against
 * DynamoDB Local and fauxqs (started here unless AWS_ENDPOINT_URL_* already point at servers). Every
 * SDK call is counted by a middleware on the clients: the worker's (handler) and the event source's
 * (receives and deletes, which Lambda's SQS trigger makes in production), invocation by invocation, with
 * the handler's log lines and its EMF metrics line. From those counts, the cost per 1,000 steps of each
 * kind of step (read-only, side-effecting, large output) and of the run, at the list prices of
 * bench/aws-prices.ts, next to Step Functions standard and Lambda durable functions for the same steps.
 * Then the resume read's capacity at steps 1, 60, 200, 300 and 600 of a second, 600-step run: warm (the
 * handler of a container that ran the earlier steps and holds them in its step cache), one step behind,
 * and cold (a fresh container, empty cache: the block summaries and the records after them), next to the
 * old cold read (head + every record). Figures, not assertions.
 *
 *   node --import tsx bench/aws-step-costs.ts [steps] [resume-read-steps]
 */
import { QueryCommand } from '@aws-sdk/client-dynamodb';
import { decodeState } from '../lib/core/codec.ts';
import { HEAD_SK, checkpointSk, runPk, stepSk } from '../lib/aws/table-layout.ts';
import { createAwsClients } from '../lib/aws/clients.ts';
import { createSqsWorkerHandler } from '../lib/aws/sqs-worker-handler.ts';
import { DEFAULT_MODEL } from '../lib/llm/anthropic.ts';
import { createLogger } from '../lib/log.ts';
import { workerMetrics } from '../functions/metrics.ts';
import { countCommands, countReadUnits, createTestResources, queueDepth, startTestRun, type TestResources } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { DURABLE_MODEL, PRICES, describePrice, STEP_FUNCTIONS_MODEL, computePer1000StepSeconds, durableCost, stepFunctionsCost, stepwiseCost, total, type CostLine, type StepCounts } from './aws-prices.ts';
import { benchCounts } from './args-support.ts';
import { benchAgent, perStep, rawItemSize } from './aws-support.ts';

const [STEPS, READ_STEPS] = benchCounts([{ name: 'steps', fallback: 60 }, { name: 'resume-read-steps', fallback: 600 }]) as [number, number];
const READ_AT = [1, 60, 200, 300, 600].filter((n) => n <= READ_STEPS);
const LARGE_EVERY = 10;
/**
 * Lambda's own START, END and REPORT lines per invocation: about 70 + 50 + 140 bytes with a request id
 * (their format, not measured here).
 */
const PLATFORM_LOG_BYTES = 260;
/** The worker's memory size in the stack (infra/stepwise-construct.ts). */
const MEMORY_MB = 256;

type Stack = { add(middleware: unknown, options: unknown): void };
interface Counter { calls: Map<string, number>; wcu: number; rcu: number; commitWcu: Map<number, number>; s3Bytes: number; logBytes: number; metricBytes: number }

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
      if (name === 'PutObject') counter.s3Bytes += Buffer.byteLength(args.input.Body as string | Uint8Array);
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
  const counter: Counter = { calls: new Map(), wcu: 0, rcu: 0, commitWcu: new Map(), s3Bytes: 0, logBytes: 0, metricBytes: 0 };
  instrument(resources.clients.sqs.middlewareStack as Stack, counter, 'SQS (event source)');
  // One container as functions/worker.ts wires it: its own clients, JSON logs at info (counted, not
  // printed), and the EMF metrics line it writes to stdout after each invocation in Lambda (counted).
  const clients = createAwsClients();
  instrument(clients.dynamo.middlewareStack as Stack, counter, 'DynamoDB');
  instrument(clients.sqs.middlewareStack as Stack, counter, 'SQS (handler)');
  instrument(clients.s3.middlewareStack as Stack, counter, 'S3');
  const log = createLogger({ service: 'stepwise-worker', agent: agent.name }, { format: 'json', env: {}, write: (line) => { counter.logBytes += Buffer.byteLength(line); } });
  const metrics = workerMetrics(agent.name, DEFAULT_MODEL, { AWS_LAMBDA_FUNCTION_NAME: 'bench' })!;
  const worker = {
    crashed: false,
    handler: createSqsWorkerHandler({ runtime: resources.runtime({ clients }), agent, model: model(), log, codeVersion: 'bench', onHandled: (h) => metrics.record(h) }),
  };
  const invocations: Usage[] = [];
  try {
    // One message per invocation (the stack's batch size): the n-th invocation runs step n, the last the DONE.
    for (let n = 1; n <= STEPS + 1; n++) {
      const before = usage(counter);
      const poll = await pollOnce(resources.clients, resources.queueUrl, worker, { max: 1 });
      if (poll.records.length !== 1 || poll.failures.length) throw new Error(`step ${n}: ${poll.records.length} records, ${poll.failures.length} failures`);
      counter.metricBytes += stdoutBytes(() => metrics.publish());
      invocations.push(minus(usage(counter), before));
    }
    if ((await queueDepth(resources.clients, resources.queueUrl)) !== 0) throw new Error('the run left messages behind');
  } finally {
    clients.destroy();
  }
  const state = decodeState((await runtime.store.load(runId))!);
  // The queue-empty check is bench plumbing, not a step's cost.
  counter.calls.delete('SQS (event source) GetQueueAttributes');

  console.log(`run: ${state.status} after ${state.step} steps in 1 container; ${invocations.length} handler invocations`);
  console.log(`\nAWS calls per invocation (one step each), ${invocations.length} invocations:`);
  for (const [label, count] of [...counter.calls].sort()) console.log(`  ${label.padEnd(44)} ${String(count).padStart(5)}  ${perStep(count, invocations.length)} / step`);
  const sum = (re: RegExp) => [...counter.calls].filter(([l]) => re.test(l)).reduce((n, [, c]) => n + c, 0);
  const n = invocations.length;
  console.log('\nper step, against the target (<= 1 DynamoDB read, <= 2 writes, 1 SQS send, 1 delete; S3 only for large outputs):');
  console.log(`  DynamoDB reads                 ${perStep(sum(/^DynamoDB (Query|GetItem)/), n)}`);
  console.log(`  DynamoDB writes, checkpoints   ${perStep(sum(/^DynamoDB (TransactWriteItems|UpdateItem|PutItem|DeleteItem)$/), n)}   (1 transaction per step, +1 UpdateItem in the ${Math.ceil(STEPS / 2)} side-effecting steps: the recorded decision)`);
  console.log(`  DynamoDB writes, ledger        ${perStep(sum(/\(ledger\)/), n)}   (claim + complete, only in the ${Math.ceil(STEPS / 2)} steps whose tool calls ctx.once)`);
  console.log(`    => a read-only step: 1 read + 1 write; a side-effecting step: 1 read + 2 checkpoint writes + 2 ledger writes`);
  console.log(`  SQS sends                      ${perStep(sum(/SendMessage/), n)}`);
  console.log(`  SQS receives (event source)    ${perStep(sum(/ReceiveMessage/), n)}`);
  console.log(`  SQS deletes (event source)     ${perStep(sum(/DeleteMessage/), n)}`);
  console.log(`  S3 puts                        ${perStep(sum(/PutObject/), n)}   (${sum(/PutObject/)} puts: the ${Math.floor(STEPS / LARGE_EVERY)} outputs of 20 KB; every other output is inline)`);
  console.log(`  consumed capacity              ${perStep(counter.wcu, n)} WCU, ${perStep(counter.rcu, n)} RCU per step (DynamoDB Local's accounting; transactions count 2x)`);
  console.log(`  logs                           ${perStep(counter.logBytes, n)} bytes of JSON log lines at info, ${perStep(counter.metricBytes, n)} bytes of EMF metrics per step`);

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

  // What each step checkpoints, for durable functions: the step's record, and a large output in full.
  printCosts(invocations.map((u, i) => ({ ...u, checkpointBytes: i < STEPS ? size(stepSk(i + 1)) + u.s3Bytes : 0 })));

  await resumeReads(resources);
} finally {
  resources.close();
  await stopServers();
}

/** What one invocation used, as the difference of the counter before and after it. */
interface Usage { reads: number; wcu: number; rcu: number; sqs: number; s3Puts: number; s3Bytes: number; logBytes: number }

function usage(c: Counter): Usage {
  const count = (re: RegExp) => [...c.calls].filter(([l]) => re.test(l)).reduce((n, [, k]) => n + k, 0);
  return {
    reads: count(/^DynamoDB (Query|GetItem)/), wcu: c.wcu, rcu: c.rcu, sqs: count(/^SQS .* (SendMessage|ReceiveMessage|DeleteMessage)/),
    s3Puts: count(/^S3 PutObject/), s3Bytes: c.s3Bytes, logBytes: c.logBytes + c.metricBytes,
  };
}

function minus(a: Usage, b: Usage): Usage {
  return Object.fromEntries(Object.entries(a).map(([k, v]) => [k, v - b[k as keyof Usage]])) as unknown as Usage;
}

/** The bytes a call writes to stdout (where Lambda's EMF metrics go), kept off this bench's output. */
function stdoutBytes(write: () => void): number {
  const original = process.stdout.write;
  let bytes = 0;
  process.stdout.write = ((chunk: string | Uint8Array) => { bytes += Buffer.byteLength(chunk); return true; }) as typeof process.stdout.write;
  try {
    write();
  } finally {
    process.stdout.write = original;
  }
  return bytes;
}

/** Cost per 1,000 steps of each kind of step, and of this run's mix, on stepwise and its two alternatives. */
function printCosts(measured: (Usage & { checkpointBytes: number })[]): void {
  const steps = measured.slice(0, STEPS);
  const kinds: { name: string; of: typeof measured }[] = [
    { name: 'read-only', of: steps.filter((_, i) => (i + 1) % 2 === 0 && (i + 1) % LARGE_EVERY !== 0) },
    { name: 'side-effecting', of: steps.filter((_, i) => (i + 1) % 2 === 1) },
    { name: '20 KB output', of: steps.filter((_, i) => (i + 1) % LARGE_EVERY === 0) },
    // The whole run over its steps: the DONE invocation's cost spread over them.
    { name: `this run (${STEPS} steps)`, of: measured },
  ];
  const mean = (xs: typeof measured, f: (u: Usage & { checkpointBytes: number }) => number, over = xs.length) => xs.reduce((n, u) => n + f(u), 0) / over;
  const columns = kinds.map(({ name, of }) => {
    const over = name.startsWith('this run') ? STEPS : of.length;
    const counts: StepCounts = {
      writeUnits: mean(of, (u) => u.wcu, over), readUnits: mean(of, (u) => u.rcu, over), sqsRequests: mean(of, (u) => u.sqs, over),
      lambdaRequests: of.length / over, logBytes: mean(of, (u) => u.logBytes + PLATFORM_LOG_BYTES, over), s3Puts: mean(of, (u) => u.s3Puts, over),
    };
    const stepwise = stepwiseCost(counts);
    const sfn = stepFunctionsCost();
    const durable = durableCost(mean(of, (u) => u.checkpointBytes, over));
    return { name, stepwise, sfn, durable };
  });
  const money = (usd: number) => `$${usd.toFixed(5)}`;
  const count = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(2));
  const cell = (l: CostLine) => `${count(l.perStep).padStart(6)} ${money(l.usdPer1000)}`.padStart(17);
  const row = (label: string, cells: string[]) => console.log(`  ${label.padEnd(30)}${cells.map((c) => c.padStart(17)).join(' ')}`);
  const section = (title: string, pick: (c: (typeof columns)[number]) => CostLine[], ratio: boolean) => {
    console.log(`  ${title}`);
    pick(columns[0]!).forEach((l, i) => row(`  ${l.item}`, columns.map((c) => cell(pick(c)[i]!))));
    row('  total', columns.map((c) => money(total(pick(c)))));
    if (ratio) row('  x stepwise', columns.map((c) => `${(total(pick(c)) / total(c.stepwise)).toFixed(1)}x`));
  };

  console.log(`\ncost per 1,000 steps, from the counts measured above and the list prices of bench/aws-prices.ts`);
  console.log(`(us-east-1, arm64, as known in 2025; NOT re-checked online: this machine has no network):`);
  row('', columns.map((c) => c.name));
  row('', columns.map(() => 'per step     $'));
  section(`stepwise (logs: JSON lines + EMF line measured, + ${PLATFORM_LOG_BYTES} B of Lambda's own lines)`, (c) => c.stepwise, false);
  section(`Step Functions standard (${STEP_FUNCTIONS_MODEL.transitionsPerStep} transitions: model task, tool task, choice; ${STEP_FUNCTIONS_MODEL.lambdaRequestsPerStep} Lambda requests)`, (c) => c.sfn, true);
  section(`Lambda durable functions (${DURABLE_MODEL.operationsPerStep} operations: model call, tool call; the step's checkpoint bytes)`, (c) => c.durable, true);
  const compute = computePer1000StepSeconds(MEMORY_MB);
  console.log(`  + on all three, the worker's time while a Lambda awaits the model: ${money(compute)} per 1,000 steps per second`);
  console.log(`    a step takes at ${MEMORY_MB} MB (${money(compute * 10)} for 10-second model replies); not counted above.`);
  console.log('  Not counted either: storage (per run-day, see the README), the model, Step Functions\' and durable functions\' own logs.');
  console.log('\nprices used:');
  for (const price of Object.values(PRICES)) console.log(`  ${describePrice(price).padEnd(62)} ${price.source}`);
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
