import { ChangeMessageVisibilityCommand, DeleteMessageCommand } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, receiveOneRecord, sqsEvent } from './lambda-harness.ts';
import { captureLogs } from './log-capture.ts';
import { FakeDatabase, ScriptedModel } from './write-rows-agent.ts';

let resources: TestResources | undefined;
const workers: WorkerProcess[] = [];
afterEach(() => {
  for (const w of workers.splice(0)) w.close();
  resources?.close();
});

/** One effect's way through ctx.once that the test holds: it is entered, then let go. */
class Held {
  signal: AbortSignal | undefined;
  readonly entered: Promise<void>;
  readonly opened: Promise<void>;
  enter!: () => void;
  open!: () => void;
  constructor() {
    this.entered = new Promise((resolve) => { this.enter = resolve; });
    this.opened = new Promise((resolve) => { this.open = resolve; });
  }
}

/**
 * The pattern's pause fault through the Lambda handler: invocation A frozen inside its step's effect (a
 * container frozen with a promise in flight, a long GC pause) for longer than its claim's lease and its
 * message's visibility timeout; invocation B gets the message and takes the key over. The effects of the
 * first two tries are held until the test lets them go; each checks its claim before it acts, as "What
 * ctx.once guarantees" asks of an effect.
 */
async function frozenPastLease(label: string) {
  resources = await createTestResources(label);
  const res = resources;
  const db = new FakeDatabase();
  // Starts at the real time: history rows written on this clock must not look expired to the store.
  const clock = new ManualClock(Date.now());
  const held = [new Held(), new Held()];
  let tries = 0;
  const agent = defineAgent({
    name: 'frozen', tools: [tool({
      name: 'write_row', description: 'writes a row through ctx.once', input: z.object({ batch: z.number() }), sideEffect: true,
      run: (input, ctx) => ctx.once(async (signal) => {
        const hold = held[tries++];
        if (hold) {
          hold.signal = signal;
          hold.enter();
          await hold.opened;
        }
        signal.throwIfAborted();
        return db.apply(ctx.idempotencyKey, input.batch);
      }),
    })],
  });
  const model = new ScriptedModel({ steps: 2 });
  const runtime = res.runtime();
  const runId = await startTestRun(runtime, agent, `${label}-run`);
  const receive = () => receiveOneRecord(res);
  const spawn = (processClock: ManualClock) => {
    const logs = captureLogs();
    const worker = new WorkerProcess({ resources: res, agent, model, clock: processClock, log: logs.log });
    workers.push(worker);
    return { worker, lines: logs.lines };
  };

  // A records the step's decision, claims the key and freezes inside the effect.
  const aClock = clock.process();
  const a = spawn(aClock);
  const first = await receive();
  const aDone = a.worker.handler(sqsEvent([first]), { awsRequestId: 'A' });
  await held[0]!.entered;
  aClock.freeze();
  // Its lease runs out unrenewed, and its message's visibility timeout too (made to end at once here).
  await clock.pass(61_000);
  await res.clients.sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: res.queueUrl, ReceiptHandle: first.receiptHandle, VisibilityTimeout: 0 }));
  // B gets the message (a second delivery) and takes the key over.
  const b = spawn(clock.process());
  const second = await receive();
  expect(second.attributes.ApproximateReceiveCount).toBe('2');
  const bDone = b.worker.handler(sqsEvent([second]), { awsRequestId: 'B' });
  // It watches A's claim a while on its own time first: A renews nothing meanwhile.
  await clock.settle(held[1]!.entered);
  const deleteSecond = () => res.clients.sqs.send(new DeleteMessageCommand({ QueueUrl: res.queueUrl, ReceiptHandle: second.receiptHandle }));

  /** Drives the run to its end and checks each key was applied once, the history dense, the key's one result kept. */
  const finish = async () => {
    // Past the retry's backoff (its notBefore is on this clock).
    clock.advance(2_000);
    await clock.settle(driveRun({ resources: res, runId, spawn: () => spawn(clock.process()).worker, poll: { waitSeconds: 2 } }));
    const done = decodeState((await runtime.store.load(runId))!);
    expect(done.status).toBe('completed');
    expect(done.steps.map((s) => s.result.text)).toEqual(['wrote row 1', 'wrote row 2']);
    expect([...db.applied.values()]).toEqual([1, 1]);
    const history = await runtime.store.history(runId);
    expect(history.map((h) => h.version)).toEqual(history.map((_, i) => i + 1));
    expect(await runtime.ledger.once(idempotencyKey(runId, 1), { batch: 1 }, async () => 'not again')).toBe('wrote row 1');
  };
  return { res, db, runtime, runId, key: idempotencyKey(runId, 1), held, first, aClock, a, aDone, b, bDone, deleteSecond, finish };
}

describe('an invocation frozen inside ctx.once past its lease and visibility timeout', () => {
  it('thawed after the taker-over committed: its claim is lost, it applies nothing and writes nothing', async () => {
    const { res, db, runtime, runId, key, held, first, aClock, a, aDone, bDone, deleteSecond, finish } = await frozenPastLease('frozen-after');
    held[1]!.open();
    expect(await bDone).toEqual({ batchItemFailures: [] });
    await deleteSecond();
    const committed = (await runtime.store.load(runId))!;
    expect(decodeState(committed)).toMatchObject({ status: 'running', step: 1, failures: 0, steps: [{ workerId: 'B', result: { text: 'wrote row 1' } }] });
    expect(db.applied.get(key)).toBe(1);

    // A thaws: its claim is given up (no renewal confirmed for the window B watched it), so its effect's
    // signal aborts and it acts on nothing. A crash of A's, not a failed try of the step: it writes nothing
    // and leaves its delivery to come back (a stale message then: the run has moved on).
    await aClock.thaw();
    expect(held[0]!.signal?.reason).toMatchObject({ name: 'ClaimLostError', taken: false });
    held[0]!.open();
    expect(await aDone).toEqual({ batchItemFailures: [{ itemIdentifier: first.messageId }] });
    expect(a.lines).not.toContainEqual(expect.objectContaining({ event: 'stale-write' }));
    expect(db.applied.get(key)).toBe(1);
    expect((await runtime.store.load(runId))!.version).toBe(committed.version);
    expect(await queueDepth(res.clients, res.queueUrl)).toBe(1);
    await finish();
  });

  it('thawed while the taker-over is inside the effect: it gives its claim up and writes nothing, and the taker-over\'s checkpoint commits', async () => {
    const { db, runtime, runId, key, held, first, aClock, aDone, b, bDone, deleteSecond, finish } = await frozenPastLease('frozen-during');
    await aClock.thaw();
    expect(held[0]!.signal?.reason).toMatchObject({ name: 'ClaimLostError', taken: false });
    expect(held[1]!.signal?.aborted).toBe(false);
    held[0]!.open();
    // A's try is not the step's: no failure is recorded, which would fence off B's checkpoint, and the
    // version B loaded is still the latest.
    expect(await aDone).toEqual({ batchItemFailures: [{ itemIdentifier: first.messageId }] });
    const loaded = (await runtime.store.load(runId))!;
    expect(loaded.version).toBe(1);
    expect(decodeState(loaded)).toMatchObject({ status: 'running', step: 0, failures: 0 });
    expect(db.applied.get(key)).toBeUndefined();

    // B applies the effect once and commits the step.
    held[1]!.open();
    expect(await bDone).toEqual({ batchItemFailures: [] });
    await deleteSecond();
    expect(b.lines).not.toContainEqual(expect.objectContaining({ event: 'stale-write' }));
    expect(decodeState((await runtime.store.load(runId))!)).toMatchObject({ status: 'running', step: 1, failures: 0, steps: [{ workerId: 'B', result: { text: 'wrote row 1' } }] });
    expect(db.applied.get(key)).toBe(1);
    await finish();
  });
});
