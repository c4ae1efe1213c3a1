import { ProvisionedThroughputExceededException } from '@aws-sdk/client-dynamodb';
import { ChangeMessageVisibilityCommand } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, pollOnce } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

type Command = { constructor: { name: string } };

let resources: TestResources | undefined;
afterEach(() => resources?.close());

describe('a brownout of the table, through the Lambda handler', () => {
  it('12 deliveries that cannot load the run (throttled) spend nothing: the run then completes, no failure counted', async () => {
    resources = await createTestResources('brownout');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = new ScriptedModel({ steps: 3 });
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'brownout-run');
    const worker = new WorkerProcess({ resources, agent, model });
    // The worker's table client is throttled on its first 12 reads (a throttle no local server produces);
    // every other call goes to DynamoDB Local.
    const real = worker.clients.doc.send.bind(worker.clients.doc) as (command: Command) => Promise<unknown>;
    let throttledReads = 0;
    mockClient(worker.clients.doc as never).send.callsFake((async (command: Command): Promise<unknown> => {
      // Cold loads are a Query, warm ones a GetItem of the head: both are the resume read.
      if (['QueryCommand', 'GetCommand'].includes(command.constructor.name) && throttledReads < 12) {
        throttledReads++;
        throw new ProvisionedThroughputExceededException({ message: 'The level of configured provisioned throughput for the table was exceeded', $metadata: { httpStatusCode: 400 } });
      }
      return real(command);
    }) as never);
    try {
      for (let polls = 0; polls < 40; polls++) {
        const stored = await runtime.store.load(runId);
        if (stored?.status !== 'running' && (await queueDepth(resources.clients, resources.queueUrl)) === 0) break;
        const result = await pollOnce(resources.clients, resources.queueUrl, worker, { waitSeconds: 2 });
        // The handler hid each throttled record for its backoff; let that time pass at once.
        await Promise.all(result.records.filter((r) => result.failures.includes(r.messageId)).map((r) => resources!.clients.sqs.send(
          new ChangeMessageVisibilityCommand({ QueueUrl: resources!.queueUrl, ReceiptHandle: r.receiptHandle, VisibilityTimeout: 0 }),
        )));
      }
    } finally {
      worker.close();
    }
    expect(throttledReads).toBe(12);
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state).toMatchObject({ status: 'completed', step: 3, failures: 0 });
    expect(model.calls).toEqual([1, 2, 3, 4]);
    for (let n = 1; n <= 3; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
    expect((await runtime.store.history(runId)).map((h) => h.status)).toEqual(['running', 'running', 'running', 'running', 'completed']);
  });
});
