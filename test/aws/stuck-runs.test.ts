import { randomUUID } from 'node:crypto';
import { ChangeMessageVisibilityCommand, DeleteMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSRecord } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import { defineAgent, type AgentDefinition } from '../../lib/agent.ts';
import { NOT_BEFORE_ATTRIBUTE } from '../../lib/aws/sqs-delay.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import type { Model } from '../../lib/ports.ts';
import { gate, heldModel, type Gate } from '../support/gate.ts';
import { createTestResources, queueDepth, receiveAll, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, sqsEvent, toSqsRecord } from './lambda-harness.ts';
import { loseFirstResponse } from './lost-response.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/**
 * The ways a run could be left `running` with no message to move it, through the Lambda handler on
 * DynamoDB Local and fauxqs. Two Lambda containers get the same message (the first one's visibility
 * timeout ran out while it worked, so the second holds the newest receipt); the one that got further dies.
 */

let resources: TestResources | undefined;
const workers: WorkerProcess[] = [];
afterEach(() => {
  for (const w of workers.splice(0)) w.close();
  resources?.close();
});

function worker(options: ConstructorParameters<typeof WorkerProcess>[0]): WorkerProcess {
  const w = new WorkerProcess(options);
  workers.push(w);
  return w;
}

/** The run's message, received twice: the first receipt's visibility timeout runs out (made immediate). */
async function receivedTwice(): Promise<[SQSRecord, SQSRecord]> {
  const { clients, queueUrl } = resources!;
  const [first] = await receiveAll(clients, queueUrl);
  await clients.sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: queueUrl, ReceiptHandle: first!.ReceiptHandle, VisibilityTimeout: 0 }));
  const [second] = await receiveAll(clients, queueUrl);
  expect(second?.MessageId).toBe(first!.MessageId);
  return [toSqsRecord(first!, queueUrl), toSqsRecord(second!, queueUrl)];
}

/** What Lambda does with a live container's answer: deletes the records it did not report as failed. */
async function settle(record: SQSRecord, response: SQSBatchResponse): Promise<void> {
  if (response.batchItemFailures.some((f) => f.itemIdentifier === record.messageId)) return;
  await resources!.clients.sqs.send(new DeleteMessageCommand({ QueueUrl: resources!.queueUrl, ReceiptHandle: record.receiptHandle }));
}

/** write_row, waiting at a gate before step 1's call. */
function heldAgent(db: FakeDatabase, at: Gate): AgentDefinition {
  const base = writeRowsAgent(db);
  const write = base.tools[0]!;
  return defineAgent({
    ...base,
    tools: [{ ...write, run: async (input: unknown, context: Parameters<typeof write.run>[1]) => {
      if (context.step === 1) await at.wait();
      return write.run(input, context);
    } }],
  });
}

async function expectCompleted(runId: string, db: FakeDatabase, steps: number): Promise<void> {
  const store = resources!.runtime().store;
  const state = decodeState((await store.load(runId))!);
  expect(state.status).toBe('completed');
  expect(state.steps.map((s) => s.step)).toEqual(Array.from({ length: steps }, (_, i) => i + 1));
  for (let n = 1; n <= steps; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
  const history = await store.history(runId);
  expect(history.map((h) => h.version)).toEqual(Array.from({ length: steps + 2 }, (_, i) => i + 1));
}

describe('a run is never left running with nothing to move it (Lambda handler, DynamoDB, SQS)', () => {
  it('(a) the invocation whose decision lost the race hands the message back, so the recorded call runs though the recorder died', async () => {
    resources = await createTestResources('stuck-a');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const runId = await startTestRun(resources.runtime(), agent, 'stuck-a');
    const [forA, forB] = await receivedTwice();
    const atA = gate();
    const atB = gate();
    const script = new ScriptedModel({ steps: 3 });
    // B would choose batch 101 for step 1; A's recorded batch 1 must be the one that runs.
    const other: Model = { name: 'other', decide: async (r) => (r.step === 1 ? { kind: 'tool', tool: 'write_row', input: { batch: 101 } } : script.decide(r)) };
    const a = worker({ resources, agent, model: heldModel(script, atA), crash: { point: 'C3', step: 1 } });
    const b = worker({ resources, agent, model: heldModel(other, atB) });
    const aDone = a.handler(sqsEvent([forA]), { awsRequestId: 'container-a' });
    await atA.reached;
    const bDone = b.handler(sqsEvent([forB]), { awsRequestId: 'container-b' });
    await atB.reached;

    atA.open();
    await aDone; // A recorded its decision and died: Lambda deletes nothing of a dead container
    expect(a.crashed).toBe(true);
    atB.open();
    const response = await bDone;
    // B's decision was refused while the run is still at the message's version: it hands the message
    // back rather than acking it, since the recorder may (and here did) die before its checkpoint.
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([forB.messageId]);
    await settle(forB, response);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);

    await driveRun({ resources, runId, spawn: () => worker({ resources: resources!, agent, model: script }), maxPolls: 15 });
    await expectCompleted(runId, db, 3);
    // Step 1 ran A's recorded call under the step's key; nobody asked the model for step 1 again.
    const state = decodeState((await resources.runtime().store.load(runId))!);
    expect(state.steps[0]!.input).toEqual({ batch: 1 });
    expect(script.callsFor(1)).toBe(1);
  });

  it('(b) the loser of a commit race re-sends the message the winner died before sending', async () => {
    resources = await createTestResources('stuck-b');
    const db = new FakeDatabase();
    const runId = await startTestRun(resources.runtime(), writeRowsAgent(db), 'stuck-b');
    const [forA, forB] = await receivedTwice();
    const inA = gate();
    const inB = gate();
    const model = new ScriptedModel({ steps: 3 });
    const a = worker({ resources, agent: heldAgent(db, inA), model, crash: { point: 'C7', step: 1 } });
    const b = worker({ resources, agent: heldAgent(db, inB), model });
    const aDone = a.handler(sqsEvent([forA]), { awsRequestId: 'container-a' });
    await inA.reached;
    const bDone = b.handler(sqsEvent([forB]), { awsRequestId: 'container-b' });
    await inB.reached;

    inA.open();
    await aDone; // checkpoint 2 written, then the container died before sending its message
    expect(a.crashed).toBe(true);
    expect(await resources.runtime().store.load(runId)).toMatchObject({ version: 2, status: 'running' });
    inB.open();
    const response = await bDone;
    expect(response.batchItemFailures).toEqual([]);
    await settle(forB, response);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);

    const agent = writeRowsAgent(db);
    await driveRun({ resources, runId, spawn: () => worker({ resources: resources!, agent, model }), maxPolls: 15 });
    await expectCompleted(runId, db, 3);
  });

  it('(c) a decision whose write DynamoDB applied but whose answer was lost is not mistaken for another worker\'s', async () => {
    resources = await createTestResources('stuck-c');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = new ScriptedModel({ steps: 3 });
    const runId = await startTestRun(resources.runtime(), agent, 'stuck-c');
    let lost: ReturnType<typeof loseFirstResponse> | undefined;
    await driveRun({
      resources, runId, maxPolls: 15,
      spawn: () => {
        const w = worker({ resources: resources!, agent, model });
        lost ??= loseFirstResponse(w.clients.doc, 'UpdateItem');
        return w;
      },
    });
    expect(lost!.fired()).toBe(true);
    await expectCompleted(runId, db, 3);
    // The model was asked once per step: the recorded decision was ours, and it stood.
    expect(model.calls).toEqual([1, 2, 3, 4]);
  });
});

describe('re-driving on SQS', () => {
  it('without a token is a plain send: a repeated start while the message is there adds nothing', async () => {
    resources = await createTestResources('redrive-plain');
    const runtime = resources.runtime();
    const agent = writeRowsAgent(new FakeDatabase());
    await startTestRun(runtime, agent, 'again');
    await startTestRun(runtime, agent, 'again');
    expect(await runtime.queue.redrive({ runId: 'again', version: 1 })).toBe(true);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);
    // A token gets past the deduplication of the earlier send (the sweeper's way), once per token.
    await runtime.queue.redrive({ runId: 'again', version: 1 }, { token: 'sweep-1' });
    await runtime.queue.redrive({ runId: 'again', version: 1 }, { token: 'sweep-1' });
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(2);
  });
});

describe('the Lambda handler and message groups', () => {
  it('hands the later records of a group back at once when an earlier one fails, instead of leaving them in flight for the visibility timeout', async () => {
    resources = await createTestResources('group-handback');
    const { clients, queueUrl } = resources;
    const w = worker({ resources, agent: writeRowsAgent(new FakeDatabase()), model: new ScriptedModel({ steps: 1 }) });
    // Three messages of one run's group; the first is a retry that is not due yet, so it cannot be handled
    // now. fauxqs keeps one message per group in flight where SQS hands Lambda several of a group in one
    // batch, so they are sent in groups of their own and presented to the handler as one group, as Lambda would.
    const send = (runId: string, notBefore?: number) => clients.sqs.send(new SendMessageCommand({
      QueueUrl: queueUrl, MessageBody: JSON.stringify({ runId, version: 1 }), MessageGroupId: runId, MessageDeduplicationId: randomUUID(),
      ...(notBefore ? { MessageAttributes: { [NOT_BEFORE_ATTRIBUTE]: { DataType: 'Number', StringValue: String(notBefore) } } } : {}),
    }));
    await send('ghost-1', Date.now() + 3_600_000);
    await send('ghost-2');
    await send('ghost-3');
    const received = await receiveAll(clients, queueUrl, 600);
    expect(received.map((m) => JSON.parse(m.Body!).runId)).toEqual(['ghost-1', 'ghost-2', 'ghost-3']);
    const records = received.map((m) => {
      const record = toSqsRecord(m, queueUrl);
      return { ...record, attributes: { ...record.attributes, MessageGroupId: 'run-1' } };
    });
    const response = await w.handler(sqsEvent(records), { awsRequestId: 'group-request' });
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(records.map((r) => r.messageId));

    // The first stays hidden until it is due; the two behind it are visible again at once instead of staying
    // in flight for the batch's whole visibility timeout (SQS FIFO still delivers them only after the first).
    const back = await receiveAll(clients, queueUrl);
    expect(back.map((m) => JSON.parse(m.Body!).runId).sort()).toEqual(['ghost-2', 'ghost-3']);
  });
});
