import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../lib/aws/clients.ts';
import { ensureQueue } from '../../lib/aws/provision.ts';
import { SqsRunQueue, deduplicationId } from '../../lib/aws/sqs-run-queue.ts';
import type { Delivery } from '../../lib/ports.ts';
import { createTestResources, queueDepth, receiveAll, uniqueName, type TestResources } from './aws-fixtures.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

/** The first receive that delivers anything, of five long polls of a second. */
async function firstDelivered(queue: SqsRunQueue): Promise<Delivery[]> {
  let delivered: Delivery[] = [];
  for (let i = 0; i < 5 && !delivered.length; i++) delivered = await queue.receive({ max: 10, waitMs: 1000 });
  return delivered;
}

describe('SQS FIFO run queue', () => {
  it('enqueues the message for a run version once, however often it is sent', async () => {
    resources = await createTestResources('queue-dedup');
    const queue = resources.runtime().queue;
    await queue.send({ runId: 'r1', version: 3 });
    await queue.send({ runId: 'r1', version: 3 });
    await queue.send({ runId: 'r1', version: 3 });
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);
    const [delivery] = await queue.receive({ max: 10 });
    expect(JSON.parse(delivery!.body)).toEqual({ runId: 'r1', version: 3 });
    expect(delivery!.receiveCount).toBe(1);
    expect(await queue.ack(delivery!)).toBe(true);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
  });

  it('refuses a visibility timeout past SQS\'s 12 hours, which it cut short under a heartbeat timed from the longer one', async () => {
    resources = await createTestResources('queue-visibility');
    const queue = resources.runtime().queue;
    await queue.send({ runId: 'r1', version: 1 });
    await expect(queue.receive({ visibilityMs: 12 * 3_600_000 + 1 })).rejects.toThrow('a visibility timeout on SQS is at most 12 hours (43200000 ms), not 43200001 ms');
    // Nothing was taken: the message is there for a receive that asks for what SQS gives.
    const [delivery] = await queue.receive({ visibilityMs: 12 * 3_600_000 });
    expect(JSON.parse(delivery!.body)).toEqual({ runId: 'r1', version: 1 });
  });

  it('delivers one run\'s messages one at a time and in order, other runs alongside', async () => {
    resources = await createTestResources('queue-order');
    const queue = resources.runtime().queue;
    await queue.send({ runId: 'a', version: 1 });
    await queue.send({ runId: 'a', version: 2 });
    await queue.send({ runId: 'b', version: 1 });
    const first = await queue.receive({ max: 10 });
    expect(first.map((d) => JSON.parse(d.body))).toEqual([{ runId: 'a', version: 1 }, { runId: 'b', version: 1 }]);
    // Run a's next message waits until its first is done.
    expect(await queue.receive({ max: 10 })).toEqual([]);
    await queue.ack(first[0]!);
    expect((await queue.receive({ max: 10 })).map((d) => JSON.parse(d.body))).toEqual([{ runId: 'a', version: 2 }]);
  });

  it('releases a message to be delivered again with a higher receive count', async () => {
    resources = await createTestResources('queue-release');
    const queue = resources.runtime().queue;
    await queue.send({ runId: 'r', version: 1 });
    const [first] = await queue.receive({ visibilityMs: 30_000 });
    await queue.release(first!, 0);
    const [again] = await queue.receive({ visibilityMs: 30_000 });
    expect(again!.body).toBe(first!.body);
    expect(again!.receiveCount).toBe(2);
  });

  it('holds a delayed message back until it is due (FIFO queues have no per-message delay)', async () => {
    resources = await createTestResources('queue-delay');
    let now = Date.now();
    const queue = resources.runtime({ clock: { now: () => now } }).queue;
    await queue.send({ runId: 'r', version: 4 }, { delayMs: 1000 });
    expect(await queue.receive({ max: 10 })).toEqual([]);
    now += 1000; // the consumer's clock says it is due; SQS makes it visible after the hide it was given
    const delivered = await firstDelivered(queue);
    expect(delivered.map((d) => JSON.parse(d.body))).toEqual([{ runId: 'r', version: 4 }]);
    // The early receive was hidden again without reaching the step: it is not counted as a delivery.
    expect(delivered[0]!.receiveCount).toBe(1);
  });

  it('hides a backoff sent by a clock an hour ahead for its delay by SQS\'s clock, where it stood still an hour more', async () => {
    resources = await createTestResources('queue-delay-skew');
    const sender = resources.runtime({ clock: { now: () => Date.now() + 3_600_000 } }).queue;
    const receiver = resources.runtime().queue;
    await sender.send({ runId: 'r', version: 2 }, { delayMs: 1000 });
    expect(await receiver.receive({ max: 10 })).toEqual([]);
    const delivered = await firstDelivered(receiver);
    expect(delivered.map((d) => JSON.parse(d.body))).toEqual([{ runId: 'r', version: 2 }]);
    expect(delivered[0]!.receiveCount).toBe(1);
  });

  it('sends a wait\'s timer without its delay: the receiver\'s clock alone decides it, as the engine checks the deadline on it', async () => {
    resources = await createTestResources('queue-timer-delay');
    const queue = resources.runtime().queue;
    await queue.send({ runId: 't', version: 1 }, { delayMs: 1000, timer: true });
    await queue.send({ runId: 'b', version: 1 }, { delayMs: 1000 });
    const raw = await receiveAll(resources.clients, resources.queueUrl);
    const attributes = Object.fromEntries(raw.map((m) => [JSON.parse(m.Body!).runId, Object.keys(m.MessageAttributes ?? {}).sort()]));
    expect(attributes).toEqual({ t: ['notBefore'], b: ['delayMs', 'notBefore'] });
  });

  it('redrives past the deduplication of the original send, once per token', async () => {
    resources = await createTestResources('queue-redrive');
    const queue = resources.runtime().queue;
    await queue.send({ runId: 'r', version: 2 });
    await queue.redrive({ runId: 'r', version: 2 }, { token: 'sweep-1' });
    await queue.redrive({ runId: 'r', version: 2 }, { token: 'sweep-1' });
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(2);
  });

  it("holds a long poll past the clients' requestTimeout: a receive that waits is not cut off as a hung request", async () => {
    resources = await createTestResources('queue-long-poll');
    // Clients that fail any request unanswered after 1 s (as the default's 10 s would a 20 s poll).
    const strict = createAwsClients({ requestTimeoutMs: 1_000 });
    try {
      const queue = new SqsRunQueue({ sqs: strict.sqs, queueUrl: resources.queueUrl });
      const polling = queue.receive({ waitMs: 4_000 });
      await new Promise((resolve) => setTimeout(resolve, 1_800));
      await resources.runtime().queue.send({ runId: 'late', version: 1 });
      const [delivery] = await polling;
      expect(JSON.parse(delivery!.body)).toEqual({ runId: 'late', version: 1 });
    } finally {
      strict.destroy();
    }
  });

  it('ends a long poll when its signal aborts; a message the cut poll still took comes back after its visibility timeout', async () => {
    resources = await createTestResources('queue-poll-abort');
    const queue = resources.runtime().queue;
    const stop = new AbortController();
    // A 20 s poll on an empty queue: the test's 15 s timeout fails it if the abort does not end the poll.
    const polling = queue.receive({ waitMs: 20_000, visibilityMs: 1_000, signal: stop.signal });
    await new Promise((resolve) => setTimeout(resolve, 300));
    stop.abort();
    expect(await polling).toEqual([]);
    // Aborted before it began, it asks SQS nothing.
    expect(await queue.receive({ signal: stop.signal })).toEqual([]);
    // The server may still hold the cut poll, and hand it a message sent now (fauxqs does, as SQS can):
    // hidden for that poll's visibility timeout, then delivered again. Nothing is lost.
    await queue.send({ runId: 'r', version: 1 });
    const [delivery] = await queue.receive({ waitMs: 5_000 });
    expect(JSON.parse(delivery!.body)).toEqual({ runId: 'r', version: 1 });
  }, 15_000);

  it('keeps deduplication ids within SQS limits for the longest run ids', () => {
    const id = deduplicationId({ runId: 'x'.repeat(128), version: 123456 }, 'sweep-99');
    expect(id).toMatch(/^[0-9a-f]{64}$/);
    expect(deduplicationId({ runId: 'run-1', version: 7 })).toBe('run-1/v7');
  });

  it('sends the timer of the longest run id in a group of its own within SQS limits (fauxqs takes any length; SQS refuses over 128)', async () => {
    resources = await createTestResources('queue-timer-group');
    const queue = resources.runtime().queue;
    const longest = 'x'.repeat(128);
    await queue.send({ runId: longest, version: 2 });
    await queue.send({ runId: longest, version: 2 }, { timer: true, delayMs: 0 });
    await queue.send({ runId: 'run-1', version: 2 }, { timer: true, delayMs: 0 });
    const groups = (await receiveAll(resources.clients, resources.queueUrl)).map((m) => m.Attributes!.MessageGroupId!);
    expect(groups).toHaveLength(3);
    expect(groups).toContain(longest);
    expect(groups).toContain('run-1~timer');
    const timer = groups.find((g) => g !== longest && g !== 'run-1~timer');
    expect(timer?.length).toBeLessThanOrEqual(128);
  });

  it('refuses a standard queue', async () => {
    resources = await createTestResources('queue-standard');
    expect(() => new SqsRunQueue({ sqs: resources!.clients.sqs, queueUrl: resources!.queueUrl.replace('.fifo', '') })).toThrow(/not a FIFO queue/);
  });

  it('ensureQueue creates a FIFO queue with a FIFO dead-letter queue, and is idempotent', async () => {
    resources = await createTestResources('queue-provision', { maxReceiveCount: 7, visibilityTimeoutSeconds: 90 });
    const name = uniqueName('again');
    const first = await ensureQueue(resources.clients.sqs, name, { maxReceiveCount: 7, visibilityTimeoutSeconds: 90 });
    const second = await ensureQueue(resources.clients.sqs, `${name}.fifo`, { maxReceiveCount: 7, visibilityTimeoutSeconds: 120 });
    expect(second).toEqual(first);
    const { Attributes } = await resources.clients.sqs.send(new GetQueueAttributesCommand({ QueueUrl: first.queueUrl, AttributeNames: ['All'] }));
    expect(Attributes).toMatchObject({ FifoQueue: 'true', VisibilityTimeout: '120' });
    expect(JSON.parse(Attributes!.RedrivePolicy!)).toMatchObject({ maxReceiveCount: 7 });
    expect(first.dlqUrl).toMatch(/-dlq\.fifo$/);
  });
});
