import { afterEach, describe, expect, it, vi } from 'vitest';
import type { CrashPoint } from '../../lib/engine/deps.ts';
import type { Handled } from '../../lib/engine/handle-message.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { runWorker, type WorkerOptions } from '../../lib/engine/worker-loop.ts';
import type { Delivery } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/** The runs whose steps a worker checkpointed, in the order it did them. */
const stepped = (log: string[]) => (h: Handled) => {
  if (h.action === 'ack' && h.outcome?.kind === 'advanced') log.push(`${h.runId}:${h.outcome.state.step}`);
};

/** Works the queue until nothing is visible: no sweep, no wait, real heartbeats that never fire this fast. */
const drainOptions = (extra: WorkerOptions = {}): WorkerOptions => ({ visibilityMs: VISIBILITY_MS, waitMs: 0, idleExitMs: 0, sweepEveryMs: 0, ...extra });

/**
 * On the local runtime a step's checkpoint also receives the worker's next message (QueueWork.receive),
 * so after its first message a busy worker makes no receive of its own: one write transaction per step.
 */
describe('worker loop: the next delivery comes with the step\'s checkpoint', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  const worker = (rows: FakeRows, clock: ManualClock, workerId = 'A', crashAt?: { point: CrashPoint; step: number }) => workerProcess({
    dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(3)), clock, workerId, ...(crashAt ? { crashAt } : {}),
  });

  it('a worker with two runs alternates their steps and receives from the queue only when its last step brought nothing', async () => {
    db = tempDb();
    const rows = new FakeRows();
    const w = worker(rows, new ManualClock());
    await start(w.deps, 'a', 'a');
    await start(w.deps, 'b', 'b');
    const receive = vi.spyOn(w.runtime.queue, 'receive');
    const order: string[] = [];
    // Time goes on between steps, as it does (the queue is FIFO by the millisecond a message is visible).
    const clock = w.deps.clock as ManualClock;
    clock.advance(1);
    await runWorker(w.deps, w.runtime.queue, drainOptions({ onHandled: (h) => { stepped(order)(h); clock.advance(1); } }));

    // FIFO as a receive is: the message a step just sent waits behind the other run's older one.
    expect(order).toEqual(['a:1', 'b:1', 'a:2', 'b:2', 'a:3', 'b:3', 'a:3', 'b:3']);
    // The first message, then the empty poll after the last step: eight steps, two receives.
    expect(receive).toHaveBeenCalledTimes(2);
    expect(await receive.mock.results[1]!.value).toEqual([]);
    expect((await loadState(w.runtime, 'a')).status).toBe('completed');
    expect((await loadState(w.runtime, 'b')).status).toBe('completed');
    expect(rows.received).toHaveLength(6);
    expect(w.runtime.queue.depth()).toBe(0);
    w.runtime.close();
  });

  for (const stop of ['signal', 'onHandled'] as const) {
    it(`a worker stopped (${stop}) while it holds the next delivery hands it back: another takes it at once, no restart counted`, async () => {
      db = tempDb();
      const rows = new FakeRows();
      const clock = new ManualClock();
      const w = worker(rows, clock);
      await start(w.deps, 'a', 'a');
      const controller = new AbortController();
      const order: string[] = [];
      await runWorker(w.deps, w.runtime.queue, drainOptions({
        signal: controller.signal,
        onHandled: (h) => {
          stepped(order)(h);
          if (stop === 'signal') controller.abort();
          return stop === 'onHandled';
        },
      }));
      expect(order).toEqual(['a:1']);
      w.runtime.close();

      // No time passes: the message is not waiting out a visibility timeout.
      const b = worker(rows, clock.process(), 'B');
      const [next] = await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      expect(JSON.parse(next!.body)).toEqual({ runId: 'a', version: 2 });
      expect(next!.receiveCount).toBe(1);
      const restarts = vi.spyOn(b.runtime.store, 'addRestarts');
      expect(await handleDelivery(b.deps, next!)).toMatchObject({ action: 'ack', acked: true, outcome: { kind: 'advanced', state: { step: 2 } } });
      expect(restarts).not.toHaveBeenCalled();
      expect((await b.runtime.store.load('a'))!.restarts).toBeUndefined();
      b.runtime.close();
    });
  }

  it('a worker frozen while it holds the next delivery, back after another took it over: its late start changes nothing and repeats no effect', async () => {
    db = tempDb();
    const rows = new FakeRows();
    const clock = new ManualClock();
    const aClock = clock.process();
    const a = worker(rows, aClock, 'A');
    await start(a.deps, 'a', 'a');
    const [first] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const handled = await handleDelivery(a.deps, first!, { receive: a.runtime.queue.receiveInCommit(VISIBILITY_MS) });
    expect(handled).toMatchObject({ action: 'ack', acked: true });
    const [held] = handled.action === 'ack' ? handled.next ?? [] : [];
    expect(JSON.parse(held!.body)).toEqual({ runId: 'a', version: 2 });

    // A freezes past the visibility timeout; B gets the message and works the run to its end.
    aClock.freeze();
    const b = worker(rows, clock.process(), 'B');
    clock.advance(VISIBILITY_MS + 1);
    const order: string[] = [];
    await runWorker(b.deps, b.runtime.queue, drainOptions({ onHandled: stepped(order) }));
    expect(order).toEqual(['a:2', 'a:3', 'a:3']);

    // A thaws and starts what it held: the run moved on, its receipt is stale, nothing is written twice.
    await aClock.thaw();
    const late = await handleDelivery(a.deps, held!);
    expect(late).toMatchObject({ action: 'ack', outcome: { kind: 'stale-message', status: 'completed' } });
    expect(late.action === 'ack' && late.acked).toBeFalsy();
    expect(await a.runtime.queue.ack(held!)).toBe(false);
    expect(await a.runtime.queue.handBack(held!)).toBe(false);
    expect(rows.received).toHaveLength(3);
    expect((await b.runtime.store.history('a')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
    expect(b.runtime.queue.depth()).toBe(0);
    a.runtime.close(); b.runtime.close();
  });

  /**
   * A worker back from a freeze redrives the run's newest version before it acks, since its delivery may
   * have been the run's only message. If another worker has since taken the run, the row in its hands is
   * that message, whatever version the row still says: the redrive must leave its receipt and lease
   * alone, or the run's next step would be open to a third worker while the holder works it.
   */
  for (const path of ['stale message', 'stale write'] as const) {
    it(`a frozen worker back while another holds the run (${path}): its redrive takes nothing from the holder, every step once`, async () => {
      db = tempDb();
      const rows = new FakeRows();
      const clock = new ManualClock();
      const a = worker(rows, clock.process(), 'A');
      const b = worker(rows, clock.process(), 'B');
      await start(a.deps, 'a', 'a');
      const receiveA = a.runtime.queue.receiveInCommit(VISIBILITY_MS);
      const receiveB = b.runtime.queue.receiveInCommit(VISIBILITY_MS);
      /** B takes the run after A's lease ran out and steps it once, holding the run's next delivery. */
      let bHeld: Delivery | undefined;
      const takeOver = async () => {
        clock.advance(VISIBILITY_MS + 1);
        const [taken] = await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
        const handled = await handleDelivery(b.deps, taken!, { receive: receiveB });
        expect(handled).toMatchObject({ action: 'ack', acked: true, outcome: { kind: 'advanced' } });
        bHeld = handled.action === 'ack' ? handled.next?.[0] : undefined;
        expect(bHeld).toBeDefined();
      };

      const [first] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      let late: Delivery;
      if (path === 'stale message') {
        // A steps once and holds the delivery of version 2; it freezes, and B steps version 2.
        const handled = await handleDelivery(a.deps, first!, { receive: receiveA });
        late = (handled.action === 'ack' ? handled.next?.[0] : undefined)!;
        expect(JSON.parse(late.body)).toEqual({ runId: 'a', version: 2 });
        await takeOver();
        expect(await handleDelivery(a.deps, late, { receive: receiveA })).toMatchObject({ action: 'ack', outcome: { kind: 'stale-message', status: 'running', version: 3 } });
      } else {
        // A freezes after its tool ran, before its commit; B steps version 1 (the tool's result is reused).
        late = first!;
        const inner = a.deps.probe;
        a.deps.probe = async (point) => { if (point === 'C4') { a.deps.probe = inner; await takeOver(); } };
        const handled = await handleDelivery(a.deps, late, { receive: receiveA });
        expect(handled).toEqual({ action: 'ack', runId: 'a' });
      }
      // A acks what it held: the row is B's now. Nothing is visible to a third worker either.
      expect(await a.runtime.queue.ack(late)).toBe(false);
      expect(await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS })).toEqual([]);

      // B works on from what it holds, each step's commit taking the next: the run ends, every step once.
      const order: string[] = [];
      for (let d = bHeld; d;) {
        const handled: Handled = await handleDelivery(b.deps, d, { receive: receiveB });
        expect(handled).toMatchObject({ action: 'ack', acked: true });
        stepped(order)(handled);
        d = handled.action === 'ack' ? handled.next?.[0] : undefined;
      }
      expect(order).toEqual(path === 'stale message' ? ['a:3', 'a:3'] : ['a:2', 'a:3', 'a:3']);
      expect((await loadState(b.runtime, 'a')).status).toBe('completed');
      expect([...rows.rows.values()]).toEqual([1, 2, 3]);
      // Each row applied once; B's retry of A's uncommitted step sent the same key again, as it must.
      const retried = path === 'stale write' ? ['a/step-1'] : [];
      expect(rows.received).toEqual(['a/step-1', ...retried, 'a/step-2', 'a/step-3']);
      expect((await b.runtime.store.history('a')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
      expect(b.runtime.queue.depth()).toBe(0);
      a.runtime.close(); b.runtime.close();
    });
  }

  for (const point of ['C6', 'C7', 'C8'] as const) {
    it(`a worker killed at ${point}, after the commit that took its next message: the message comes back after the visibility timeout and the run completes, every step once`, async () => {
      db = tempDb();
      const rows = new FakeRows();
      const clock = new ManualClock();
      const a = worker(rows, clock.process(), 'A', { point, step: 1 });
      await start(a.deps, 'a', 'a');
      // The process dies at the crash point: nothing after it runs, the loop included.
      const dead = new AbortController();
      const probe = a.deps.probe!;
      a.deps.probe = async (p, at) => {
        try { await probe(p, at); } catch (error) { if (error instanceof SimulatedCrash) dead.abort(); throw error; }
      };
      await runWorker(a.deps, a.runtime.queue, drainOptions({ signal: dead.signal }));
      expect(dead.signal.aborted).toBe(true);
      expect((await a.runtime.store.load('a'))!.version).toBe(2);

      // Step 2's message was received by step 1's commit: in flight, with nobody to work or hand it back.
      const bClock = clock.process();
      const b = worker(rows, bClock, 'B');
      expect(await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS })).toEqual([]);
      bClock.advance(VISIBILITY_MS + 1);
      const order: string[] = [];
      await runWorker(b.deps, b.runtime.queue, drainOptions({ onHandled: stepped(order) }));

      expect(order).toEqual(['a:2', 'a:3', 'a:3']);
      expect((await loadState(b.runtime, 'a')).status).toBe('completed');
      expect([...rows.rows.values()]).toEqual([1, 2, 3]);
      expect(rows.received).toHaveLength(3); // each row's tool ran once
      expect((await b.runtime.store.history('a')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
      expect(b.runtime.queue.depth()).toBe(0);
      a.runtime.close(); b.runtime.close();
    });
  }
});

describe('worker loop: an error no retry mends (stopOn)', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('from its sweep, stops the worker with that error, where any other sweep failure is logged and the worker goes on', async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    const damaged = Object.assign(new Error('database disk image is malformed'), { code: 'SQLITE_CORRUPT' });
    const stopOn = (error: unknown) => (error as { code?: string }).code === 'SQLITE_CORRUPT';
    await expect(runWorker(w.deps, w.runtime.queue, drainOptions({ sweepEveryMs: 1, sweep: async () => { throw damaged; }, stopOn }))).rejects.toBe(damaged);
    // Another error from the sweep is the next sweep's to retry: the worker drains the queue and returns.
    await expect(runWorker(w.deps, w.runtime.queue, drainOptions({ sweepEveryMs: 1, sweep: async () => { throw new Error('throttled'); }, stopOn }))).resolves.toBeUndefined();
    w.runtime.close();
  });
});

describe('worker loop: a long receive wait', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  // Not timed (tests assert no wall-clock times): a wait of ten minutes outlasts the test's timeout, so a
  // worker that waited it out fails the test; one that stops at its next poll passes.
  it('an idle worker stopped in a long poll (waitMs ten minutes) stops at its next poll, where it polled on for the whole wait', { timeout: 60_000 }, async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 100);
    await runWorker(w.deps, w.runtime.queue, { waitMs: 600_000, sweepEveryMs: 0, signal: stop.signal });
    w.runtime.close();
  });

  it('an idle worker with a long poll (waitMs ten minutes) sweeps on time, where its next sweep came only once the wait was over', { timeout: 60_000 }, async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    // The sweep's time is the engine's clock: the real one here, so that sweeps come due as time passes.
    const deps = { ...w.deps, clock: { now: () => Date.now() } };
    const stop = new AbortController();
    let sweeps = 0;
    await runWorker(deps, w.runtime.queue, {
      waitMs: 600_000, sweepEveryMs: 200, signal: stop.signal,
      sweep: async () => { if (++sweeps === 2) stop.abort(); },
    });
    expect(sweeps).toBe(2);
    w.runtime.close();
  });

  it('an idle worker with a long poll (waitMs ten minutes) leaves at its idleExitMs, where it left only once the wait was over', { timeout: 60_000 }, async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    await runWorker(w.deps, w.runtime.queue, { waitMs: 600_000, sweepEveryMs: 0, idleExitMs: 200 });
    w.runtime.close();
  });
});
