/**
 * What a waiting run costs per day on AWS, from what the code stores and calls: the items of a run that
 * waits for an approval (DynamoDB Local + fauxqs, through the worker Lambda handler), their bytes in the
 * table and its indexes, whether anything sits in SQS, and the calls made while it waits. Priced with
 * us-east-1 list prices (DynamoDB standard storage $0.25 per GB-month). Printed, never asserted.
 *
 *   node --import tsx bench/wait-costs.ts
 */
import { QueryCommand } from '@aws-sdk/client-dynamodb';
import { PK, runPk, waitEventPk } from '../lib/aws/table-layout.ts';
import { decodeState } from '../lib/core/codec.ts';
import { createTestResources, queueDepth, startTestRun } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { FakeRows } from '../test/support/fake-tool.ts';
import { ApprovalFlowModel, OneWaitModel, waitAgent } from '../test/support/wait-agent.ts';
import { rawItemSize } from './aws-support.ts';

const STORAGE_PER_GB_MONTH = 0.25;
/** DynamoDB adds 100 bytes of overhead per item, in the table and in each index holding it. */
const ITEM_OVERHEAD = 100;

async function measure(kind: 'approval' | 'event'): Promise<void> {
  const resources = await createTestResources(`bench-wait-${kind}`);
  try {
    const agent = waitAgent(new FakeRows(), []);
    const model = kind === 'approval'
      ? new ApprovalFlowModel()
      : new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key: 'order-1', timeoutSeconds: 600 } });
    const worker = new WorkerProcess({ resources, agent, model, waits: () => ({ maxTimerMs: 15 * 60_000 }) });
    const runId = await startTestRun(worker.runtime, agent, `wait-${kind}`);
    for (let i = 0; i < 20 && (await worker.runtime.store.load(runId))?.status !== 'waiting'; i++) {
      await pollOnce(resources.clients, resources.queueUrl, worker, { waitSeconds: 1 });
    }
    const state = decodeState((await worker.runtime.store.load(runId))!);
    const query = async (pk: string) => (await resources.clients.dynamo.send(new QueryCommand({
      TableName: resources.tableName, KeyConditionExpression: '#pk = :pk', ExpressionAttributeNames: { '#pk': PK },
      ExpressionAttributeValues: { ':pk': { S: pk } }, ConsistentRead: true,
    }))).Items ?? [];
    const items = [...await query(runPk(runId)), ...(state.wait?.event ? await query(waitEventPk(state.wait.event.type, state.wait.event.key)) : [])];
    const bytes = items.reduce((n, item) => n + rawItemSize(item as Record<string, unknown>) + ITEM_OVERHEAD, 0);
    // The head is also in the status index and, while waiting, in the deadline index: only the projected
    // attributes, estimated at 200 bytes each with overhead.
    const indexBytes = 2 * 200;
    const perDay = ((bytes + indexBytes) / 2 ** 30) * STORAGE_PER_GB_MONTH / 30;
    const history = items.filter((i) => String((i as { sk?: { S?: string } }).sk?.S).startsWith('c#')).length;
    console.log(`${kind} wait at step ${state.wait?.step} (${state.steps.length} steps done): ${items.length} items (${history} history rows that expire with retention), ${bytes} B in the table + ~${indexBytes} B in indexes`);
    console.log(`  SQS messages held while it waits: ${await queueDepth(resources.clients, resources.queueUrl)} (only a deadline within 15 minutes keeps its timer in SQS); schedules: none (the stack's one sweeper finds later deadlines in an index)`);
    console.log(`  storage: $${perDay.toExponential(2)} per run-day, $${(perDay * 1_000_000).toFixed(4)} per million run-days`);
    worker.close();
  } finally {
    resources.close();
  }
}

const stop = await useAwsServers();
try {
  await measure('approval');
  await measure('event');
  console.log('calls while waiting: none per run. Per stack: the sweeper every 5 minutes queries 4 shards of the status index and 4 of the deadline index (about 8 x 0.5 RCU on-demand reads, 288 times a day: ~1,150 RCU/day = $0.0003/day), plus its Lambda invocations.');
} finally {
  await stop();
}
