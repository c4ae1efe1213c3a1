import { DynamoDBServiceException } from '@aws-sdk/client-dynamodb';
import { ChangeMessageVisibilityCommand, SQSServiceException } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { openAwsRuntime } from '../../lib/aws/runtime.ts';
import { createSqsWorkerHandler } from '../../lib/aws/sqs-worker-handler.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { createTestResources, startTestRun, uniqueName, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce, type PollResult } from './lambda-harness.ts';
import { captureLogs } from './log-capture.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/**
 * The Lambda worker when AWS refuses a call for good (the role's policy, a KMS key, a table its environment
 * names that is not there): each delivery's failure says so and what to change, where it was logged as a
 * passing fault in AWS's words alone, which may name neither the service nor the resource. The record is
 * still a batch item failure (it comes back, and at last reaches the dead-letter queue), and nothing is
 * applied twice once the refusal is mended.
 */
type Command = { constructor: { name: string }; input: object };

let resources: TestResources | undefined;
afterEach(() => resources?.close());

const DLQ_THEN_SWEEP = 'it is delivered again until the dead-letter queue takes it, and the sweeper re-drives its run once this is mended';

/** The handler hid a failed record for its backoff: let that time pass at once. */
async function showAgain(result: PollResult): Promise<void> {
  await Promise.all(result.records.filter((r) => result.failures.includes(r.messageId)).map((r) => resources!.clients.sqs.send(
    new ChangeMessageVisibilityCommand({ QueueUrl: resources!.queueUrl, ReceiptHandle: r.receiptHandle, VisibilityTimeout: 0 }),
  )));
}

describe('the Lambda worker when AWS refuses a call for good', () => {
  it('a table TABLE_NAME names that is not there (DynamoDB Local): the failure names the variable', async () => {
    resources = await createTestResources('refused-table');
    const runId = await startTestRun(resources.runtime(), writeRowsAgent(new FakeDatabase()), 'refused-table-run');
    const { log, lines } = captureLogs();
    const runtime = openAwsRuntime({ tableName: `stepwise-${uniqueName('nope')}`, bucketName: resources.bucketName, queueUrl: resources.queueUrl, clients: resources.clients });
    const handler = createSqsWorkerHandler({ runtime, agent: writeRowsAgent(new FakeDatabase()), model: new ScriptedModel({ steps: 1 }), log, codeVersion: 'test' });
    const result = await pollOnce(resources.clients, resources.queueUrl, { handler, crashed: false });
    expect(result.failures).toEqual([result.records[0]!.messageId]);
    const line = lines.find((l) => l.event === 'delivery-error');
    expect(line).toMatchObject({ runId, version: 1, errorName: 'ResourceNotFoundException', refused: 'no-table' });
    expect(line!.msg).toBe(`message not finished: the table TABLE_NAME names does not exist in this function's region: deploy the stack or run stepwise init --backend aws, or correct TABLE_NAME; ${DLQ_THEN_SWEEP}`);
  });

  it('a commit the role may not write, then a next message the queue\'s KMS key refuses: each said so; once mended, the step is applied once', async () => {
    resources = await createTestResources('refused-role');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = new ScriptedModel({ steps: 2 });
    const runId = await startTestRun(resources.runtime(), agent, 'refused-role-run');
    const { log, lines } = captureLogs();
    const worker = new WorkerProcess({ resources, agent, model, log });
    // The first commit is refused by IAM, the first send after a commit by the queue's KMS key: faults no
    // local server produces. Everything else goes to DynamoDB Local and fauxqs.
    const refuse = (client: { send: (command: never) => Promise<unknown> }, command: string, error: () => Error) => {
      const real = client.send.bind(client) as (command: Command) => Promise<unknown>;
      let fired = false;
      mockClient(client as never).send.callsFake((async (sent: Command) => {
        if (!fired && sent.constructor.name === command) {
          fired = true;
          throw error();
        }
        return real(sent);
      }) as never);
    };
    refuse(worker.clients.doc as never, 'TransactWriteCommand', () => new DynamoDBServiceException({
      name: 'AccessDeniedException', $fault: 'client', $metadata: { httpStatusCode: 400 },
      message: `User: arn:aws:sts::123456789012:assumed-role/worker/fn is not authorized to perform: dynamodb:PutItem on resource: arn:aws:dynamodb:us-east-1:123456789012:table/${resources!.tableName} because no identity-based policy allows the dynamodb:PutItem action`,
    }));
    refuse(worker.clients.sqs as never, 'SendMessageCommand', () => new SQSServiceException({
      name: 'KmsAccessDenied', $fault: 'client', $metadata: { httpStatusCode: 400 },
      message: 'The ciphertext refers to a customer master key that does not exist, does not exist in this region, or you are not allowed to access.',
    }));
    try {
      for (let i = 0; i < 2; i++) {
        const result = await pollOnce(resources.clients, resources.queueUrl, worker, { waitSeconds: 2 });
        expect(result.failures).toHaveLength(1);
        await showAgain(result);
      }
    } finally {
      worker.close();
    }
    const [denied, kms] = lines.filter((l) => l.event === 'delivery-error');
    expect(denied).toMatchObject({ runId, errorName: 'AccessDeniedException', refused: 'permission', msg: `message not finished: the AWS identity may not make this call: allow it in the identity's IAM policy (or the resource's policy); ${DLQ_THEN_SWEEP}` });
    expect(kms).toMatchObject({ runId, errorName: 'KmsAccessDenied', refused: 'kms', msg: `message not finished: the KMS key that encrypts the table, queue or bucket is disabled, deleted or not usable by this identity: check the key's state and its key policy; ${DLQ_THEN_SWEEP}` });

    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }), poll: { waitSeconds: 2 } });
    const state = decodeState((await resources.runtime().store.load(runId))!);
    expect(state).toMatchObject({ status: 'completed', step: 2, failures: 0 });
    for (let n = 1; n <= 2; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
    // The refused commit's step was decided once: its retry ran the recorded call.
    expect(model.calls).toEqual([1, 2, 3]);
  });
});
