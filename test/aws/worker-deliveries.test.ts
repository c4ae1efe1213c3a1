import { randomUUID } from 'node:crypto';
import { DeleteMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import { DELAY_ATTRIBUTE, NOT_BEFORE_ATTRIBUTE } from '../../lib/aws/sqs-delay.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { createTestResources, queueDepth, receiveAll, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce, sqsEvent, toSqsRecord } from './lambda-harness.ts';
import { captureLogs } from './log-capture.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

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

async function sendRaw(body: string, group = 'raw', dedup: string = randomUUID()): Promise<void> {
  await resources!.clients.sqs.send(new SendMessageCommand({
    QueueUrl: resources!.queueUrl, MessageBody: body, MessageGroupId: group, MessageDeduplicationId: dedup,
  }));
}

/** A read-only tool: no recorded decision, so concurrent workers race only at the commit. */
function countingAgent(calls: { n: number }): AgentDefinition {
  return defineAgent({
    name: 'counter',
    tools: [tool({
      name: 'write_row', description: 'Counts rows (read only).', sideEffect: false,
      input: z.object({ batch: z.number() }),
      run: async (input) => { calls.n++; return `counted ${input.batch}`; },
    })],
  });
}

describe('several handler invocations on one run at once', () => {
  for (const kind of ['side-effecting', 'read-only'] as const) {
    it(`${kind} tool: one invocation advances the run, the others stop; each effect applies once`, async () => {
      resources = await createTestResources(`concurrent-${kind}`);
      const db = new FakeDatabase();
      const toolCalls = { n: 0 };
      const agent = kind === 'side-effecting' ? writeRowsAgent(db) : countingAgent(toolCalls);
      const model = new ScriptedModel({ steps: 3 });
      const runId = await startTestRun(resources.runtime(), agent, `concurrent-${kind}`);
      // The first step's message, delivered to four Lambda containers at once (as duplicates would be).
      const [message] = await receiveAll(resources.clients, resources.queueUrl);
      const record = toSqsRecord(message!, resources.queueUrl);
      const invocations = Array.from({ length: 4 }, () => worker({ resources: resources!, agent, model }));
      const responses = await Promise.all(invocations.map((w, i) => w.handler(
        sqsEvent([{ ...record, messageId: `${record.messageId}-${i}` }]), { awsRequestId: `request-${i}` },
      )));
      // A stale invocation stops without writing. One that lost the race to record the step's decision
      // while the run is still at the message's version hands the message back instead of acking it: the
      // recorder may die before its checkpoint. One that finds the run moved on acks.
      const handedBack = responses.filter((r) => r.batchItemFailures.length > 0);
      expect(handedBack.length).toBeLessThan(responses.length);
      if (kind === 'read-only') expect(handedBack).toEqual([]);
      const state = decodeState((await resources.runtime().store.load(runId))!);
      expect(state.step).toBe(1);
      expect(state.steps).toHaveLength(1);
      // The winner enqueued the next step once; the losers' re-sends of the latest version were deduplicated.
      await resources.clients.sqs.send(new DeleteMessageCommand({ QueueUrl: resources.queueUrl, ReceiptHandle: record.receiptHandle }));
      expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);
      if (kind === 'side-effecting') {
        // Only one decision is recorded; an invocation that loaded it may run the same call again (same
        // key, same input), and the ledger applies it once.
        expect(db.applied.get(idempotencyKey(runId, 1))).toBe(1);
        expect(db.receivedCount(idempotencyKey(runId, 1))).toBeGreaterThanOrEqual(1);
      } else {
        expect(toolCalls.n).toBeGreaterThanOrEqual(1);
      }

      await driveRun({ resources, runId, spawn: () => worker({ resources: resources!, agent, model }) });
      const done = decodeState((await resources.runtime().store.load(runId))!);
      expect(done.status).toBe('completed');
      expect(done.steps.map((s) => s.step)).toEqual([1, 2, 3]);
      const history = await resources.runtime().store.history(runId);
      expect(history.map((h) => h.version)).toEqual(Array.from({ length: history.length }, (_, i) => i + 1));
      expect(history.filter((h) => h.tool).map((h) => h.step)).toEqual([1, 2, 3]);
      if (kind === 'side-effecting') for (let n = 1; n <= 3; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
    });
  }
});

describe('duplicate, stale, unknown and malformed messages', () => {
  it('processes a duplicated message once: the copies find the run moved on and stop', async () => {
    resources = await createTestResources('duplicates');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = new ScriptedModel({ steps: 3 });
    const runId = await startTestRun(resources.runtime(), agent, 'dup-run');
    // Two more copies of the first message, past the queue's deduplication (as a producer retry could).
    await sendRaw(JSON.stringify({ runId, version: 1 }), runId);
    await sendRaw(JSON.stringify({ runId, version: 1 }), runId);
    const { log, lines } = captureLogs();
    const { polls } = await driveRun({ resources, runId, spawn: () => worker({ resources: resources!, agent, model, log }) });
    expect(model.calls).toEqual([1, 2, 3, 4]);
    for (let n = 1; n <= 3; n++) expect(db.receivedCount(idempotencyKey(runId, n))).toBe(1);
    expect((await resources.runtime().store.history(runId)).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
    // Each checkpoint write is logged with the run, step, version, size and the Lambda request id as worker.
    const checkpoints = lines.filter((l) => l.event === 'checkpoint');
    expect(checkpoints.map((l) => [l.step, l.version])).toEqual([[1, 2], [2, 3], [3, 4], [3, 5]]);
    const requestIds = new Set(polls.map((p) => p.requestId));
    for (const line of checkpoints) {
      expect(line).toMatchObject({ runId, workerId: expect.any(String), bytes: expect.any(Number) });
      expect(requestIds.has(line.workerId as string)).toBe(true);
      expect(line.bytes as number).toBeGreaterThan(0);
    }
    expect(lines.filter((l) => l.event === 'stale-message')).toHaveLength(2);
  });

  it('treats messages for versions the run has left as no-ops, before and after it completes', async () => {
    resources = await createTestResources('stale');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = new ScriptedModel({ steps: 2 });
    const runId = await startTestRun(resources.runtime(), agent, 'stale-run');
    const w = worker({ resources, agent, model });
    await pollOnce(resources.clients, resources.queueUrl, w);
    await pollOnce(resources.clients, resources.queueUrl, w); // now at version 3
    await sendRaw(JSON.stringify({ runId, version: 1 }), runId, 'old-1-dedup');
    await driveRun({ resources, runId, spawn: () => worker({ resources: resources!, agent, model }) });
    expect(model.calls).toEqual([1, 2, 3]);

    const versions = (await resources.runtime().store.history(runId)).map((h) => h.version);
    await sendRaw(JSON.stringify({ runId, version: 2 }), runId, 'old-2-dedup');
    const late = await pollOnce(resources.clients, resources.queueUrl, w);
    expect(late.records).toHaveLength(1);
    expect(late.failures).toEqual([]);
    // The run is done: nothing re-enqueued, nothing written, nobody asked.
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    expect((await resources.runtime().store.history(runId)).map((h) => h.version)).toEqual(versions);
    expect(model.calls).toEqual([1, 2, 3]);
    expect(db.rowCount).toBe(2);
  });

  it('acks a message for a run that does not exist, and says so in the log', async () => {
    resources = await createTestResources('ghost');
    const { log, lines } = captureLogs();
    const w = worker({ resources, agent: writeRowsAgent(new FakeDatabase()), model: new ScriptedModel({ steps: 1 }), log });
    await sendRaw(JSON.stringify({ runId: 'no-such-run', version: 1 }), 'no-such-run');
    const result = await pollOnce(resources.clients, resources.queueUrl, w);
    expect(result.records).toHaveLength(1);
    expect(result.failures).toEqual([]);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    expect(lines).toContainEqual(expect.objectContaining({ event: 'unknown-run', runId: 'no-such-run', workerId: result.requestId }));
  });

  it('names the run in the log lines of a delivery that failed and of the retry delay it could not set', async () => {
    resources = await createTestResources('delivery-error');
    const { log, lines } = captureLogs();
    const agent = writeRowsAgent(new FakeDatabase());
    const runId = await startTestRun(resources.runtime(), agent, 'delivery-error-run');
    // The container dies as the step starts: the delivery fails, and so does hiding its message for the retry.
    const w = worker({ resources, agent, model: new ScriptedModel({ steps: 1 }), log, crash: { point: 'C1', step: 1 } });
    const result = await pollOnce(resources.clients, resources.queueUrl, w);
    expect(result.crashed).toBe(true);
    const messageId = result.records[0]!.messageId;
    expect(lines).toContainEqual(expect.objectContaining({ event: 'delivery-error', messageId, runId, version: 1, error: 'crash at C1 in step 1' }));
    expect(lines).toContainEqual(expect.objectContaining({ event: 'visibility-error', messageId, runId, version: 1 }));
  });

  it('logs a malformed message with its content and drops it instead of retrying it forever', async () => {
    resources = await createTestResources('malformed');
    const { log, lines } = captureLogs();
    const model = new ScriptedModel({ steps: 1 });
    const w = worker({ resources, agent: writeRowsAgent(new FakeDatabase()), model, log });
    const bodies = ['not json at all', '{}', '{"runId":"r1"}', '{"runId":"r1","version":1,"extra":true}', '{"runId":"","version":1}', '[1,2]'];
    for (const [i, body] of bodies.entries()) await sendRaw(body, `malformed-${i}`);
    let seen = 0;
    for (let i = 0; i < 5 && seen < bodies.length; i++) {
      const result = await pollOnce(resources.clients, resources.queueUrl, w);
      expect(result.failures).toEqual([]);
      seen += result.records.length;
    }
    expect(seen).toBe(bodies.length);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    const logged = lines.filter((l) => l.event === 'malformed-message').map((l) => l.body);
    expect(logged.sort()).toEqual([...bodies].sort());
    expect(model.calls).toEqual([]);
  });
});

describe('ordering and delays on the FIFO queue', () => {
  it('returns the later records of a group with an earlier one that must wait, and handles other groups', async () => {
    resources = await createTestResources('order');
    const { log, lines } = captureLogs();
    const w = worker({ resources, agent: writeRowsAgent(new FakeDatabase()), model: new ScriptedModel({ steps: 1 }), log });
    const base = (id: string, group: string, body: string): SQSRecord => ({
      messageId: id, receiptHandle: `receipt-${id}`, body,
      attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 'x', ApproximateFirstReceiveTimestamp: '0', MessageGroupId: group },
      messageAttributes: {}, md5OfBody: '', eventSource: 'aws:sqs', eventSourceARN: 'arn', awsRegion: 'us-east-1',
    });
    const early = { ...base('a', 'g1', JSON.stringify({ runId: 'ghost-a', version: 1 })), messageAttributes: { [NOT_BEFORE_ATTRIBUTE]: { dataType: 'Number', stringValue: String(Date.now() + 60_000) } } };
    const behind = base('b', 'g1', JSON.stringify({ runId: 'ghost-b', version: 1 }));
    const other = base('c', 'g2', JSON.stringify({ runId: 'ghost-c', version: 1 }));
    const response = await w.handler(sqsEvent([early, behind, other]), { awsRequestId: 'order-request' });
    expect(response.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(['a', 'b']);
    const handledRuns = lines.filter((l) => l.event === 'unknown-run').map((l) => l.runId);
    expect(handledRuns).toEqual(['ghost-c']);
  });

  it('handles a backoff its sender stamped an hour ahead once SQS\'s clock says it is due, where it was hidden an hour more', async () => {
    resources = await createTestResources('skewed-backoff');
    const { log, lines } = captureLogs();
    const w = worker({ resources, agent: writeRowsAgent(new FakeDatabase()), model: new ScriptedModel({ steps: 1 }), log });
    const now = Date.now();
    const record = (id: string, delayMs: string | undefined): SQSRecord => ({
      messageId: id, receiptHandle: `receipt-${id}`, body: JSON.stringify({ runId: `ghost-${id}`, version: 1 }),
      // Sent 5 s ago by SQS's clock with a 1 s backoff, by a worker whose clock ran an hour ahead.
      attributes: { ApproximateReceiveCount: '1', SentTimestamp: String(now - 5_000), SenderId: 'x', ApproximateFirstReceiveTimestamp: String(now), MessageGroupId: id },
      messageAttributes: {
        [NOT_BEFORE_ATTRIBUTE]: { dataType: 'Number', stringValue: String(now - 5_000 + 3_600_000 + 1_000) },
        ...(delayMs ? { [DELAY_ATTRIBUTE]: { dataType: 'Number', stringValue: delayMs } } : {}),
      },
      md5OfBody: '', eventSource: 'aws:sqs', eventSourceARN: 'arn', awsRegion: 'us-east-1',
    });
    // The one without its delay (older code, or a timer) is hidden by this worker's clock.
    const response = await w.handler(sqsEvent([record('backoff', '1000'), record('stamped', undefined)]), { awsRequestId: 'skewed' });
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(['stamped']);
    expect(lines.filter((l) => l.event === 'unknown-run').map((l) => l.runId)).toEqual(['ghost-backoff']);
  });

  it('holds a retry back until its backoff has passed (FIFO queues have no per-message delay)', async () => {
    resources = await createTestResources('backoff');
    const db = new FakeDatabase();
    let failOnce = true;
    const attempts: number[] = [];
    const base = writeRowsAgent(db);
    const flaky = defineAgent({
      ...base,
      tools: [{ ...base.tools[0]!, run: async (input: unknown, context: Parameters<typeof base.tools[0]['run']>[1]) => {
        if (context.step === 2) attempts.push(context.attempt);
        if (context.step === 2 && failOnce) { failOnce = false; throw new Error('target database restarting'); }
        return base.tools[0]!.run(input, context);
      } }],
    });
    const model = new ScriptedModel({ steps: 2 });
    const runId = await startTestRun(resources.runtime(), flaky, 'backoff-run');
    const w = worker({ resources, agent: flaky, model });
    await pollOnce(resources.clients, resources.queueUrl, w); // step 1
    await pollOnce(resources.clients, resources.queueUrl, w); // step 2 fails: a failed attempt is recorded
    const failed = decodeState((await resources.runtime().store.load(runId))!);
    expect(failed).toMatchObject({ step: 1, failures: 1, lastError: 'target database restarting' });
    const [retry] = await receiveAll(resources.clients, resources.queueUrl);
    expect(Number(retry!.MessageAttributes?.[NOT_BEFORE_ATTRIBUTE]?.StringValue)).toBeGreaterThan(failed.updatedAt);
    // Delivered before it is due: hidden again, the model is not asked.
    const early = await w.handler(sqsEvent([toSqsRecord(retry!, resources.queueUrl)]), { awsRequestId: 'early' });
    expect(early.batchItemFailures).toHaveLength(1);
    expect(model.callsFor(2)).toBe(1);
    await driveRun({ resources, runId, spawn: () => worker({ resources: resources!, agent: flaky, model }), poll: { waitSeconds: 2 } });
    const done = decodeState((await resources.runtime().store.load(runId))!);
    expect(done.status).toBe('completed');
    expect(db.applied.get(idempotencyKey(runId, 2))).toBe(1);
    // The failed attempt kept its decision: the retry ran the same call without asking the model again.
    expect(model.callsFor(2)).toBe(1);
    // The early delivery never reached the step: the retry is the second attempt, not the third.
    expect(attempts).toEqual([1, 2]);
  });
});
