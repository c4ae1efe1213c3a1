import { afterEach, describe, expect, it } from 'vitest';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { sweepStalledRuns } from '../../lib/engine/sweep.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { silentLogger } from '../../lib/log.ts';
import type { RunQueueConsumer } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * The local safety net the AWS sweeper gives: a run that is running, has no live message and has written
 * no checkpoint for the stall window is re-driven by any worker loop.
 */

const STALL_MS = 60_000;

function setup(steps = 2) {
  const clock = new ManualClock();
  const rows = new FakeRows();
  const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(steps)), clock, workerId: 'W' });
  return { clock, rows, ...w };
}

/** Step 1 of `runId`, then its message for version 2 is consumed by a worker that does nothing more. */
async function stuckAfterStep1(w: ReturnType<typeof setup>, runId = 'run'): Promise<void> {
  await start(w.deps, 'write the rows', runId);
  const [first] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
  expect((await handleDelivery(w.deps, first!)).action).toBe('ack');
  await w.runtime.queue.ack(first!);
  const [lost] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
  await w.runtime.queue.ack(lost!);
}

let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

describe('the local stalled-run sweep', () => {
  it('re-drives a running run with no live message after the stall window, once, and the run completes', async () => {
    db = tempDb();
    const w = setup();
    await stuckAfterStep1(w, 'stuck');
    // A run whose step is in progress: its message is in flight and heartbeated, however long the step.
    await start(w.deps, 'write the rows', 'busy');
    const [busy] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    // A run waiting out a retry backoff: its message is delayed.
    await start(w.deps, 'write the rows', 'waiting');
    const [waiting] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await w.runtime.queue.release(waiting!, 10 * STALL_MS);
    const sweep = () => sweepStalledRuns(
      { store: w.runtime.store, queue: w.runtime.queue, clock: w.clock, log: silentLogger, stalled: (before, limit) => w.runtime.queue.stalledRuns(before, limit) },
      { stallMs: STALL_MS },
    );

    w.clock.advance(STALL_MS - 1);
    await w.runtime.queue.release(busy!, VISIBILITY_MS); // the heartbeat
    expect(await sweep()).toEqual([]);
    w.clock.advance(2);
    await w.runtime.queue.release(busy!, VISIBILITY_MS);
    expect(await sweep()).toEqual([{ runId: 'stuck', version: 2 }]);
    // Its message is live now: the next sweep adds nothing.
    expect(await sweep()).toEqual([]);
    expect(w.runtime.queue.depth()).toBe(3);

    await w.runtime.queue.ack(busy!);
    await w.runtime.queue.ack(waiting!);
    await drain(w.deps, w.runtime, w.clock);
    expect(await loadState(w.runtime, 'stuck')).toMatchObject({ status: 'completed', step: 2 });
    expect((await w.runtime.store.history('stuck')).map((h) => h.version)).toEqual([1, 2, 3, 4]);
    expect([...w.rows.rows.keys()].filter((k) => k.startsWith('stuck/'))).toEqual(['stuck/step-1', 'stuck/step-2']);
    w.runtime.close();
  });

  it('a re-drive makes nothing while the run has a live message for its version or a later one; an older one does not count', async () => {
    db = tempDb();
    const w = setup();
    const queue = w.runtime.queue;
    await queue.send({ runId: 'r', version: 3 });
    expect(await queue.redrive({ runId: 'r', version: 3 })).toBe(false);
    expect(await queue.redrive({ runId: 'r', version: 2 })).toBe(false);
    expect(queue.depth()).toBe(1);
    // Only a message for an older version is left: it cannot move the run at version 4 past a
    // deduplication record, so the re-drive sends, rewriting the run's row (version 3's message is stale).
    expect(await queue.redrive({ runId: 'r', version: 4 })).toBe(true);
    expect(await queue.redrive({ runId: 'r', version: 4 })).toBe(false);
    expect(queue.depth()).toBe(1);
    const delivered = [];
    for (let d = await queue.receive(); d.length; d = await queue.receive()) { delivered.push(JSON.parse(d[0]!.body)); await queue.ack(d[0]!); }
    expect(delivered).toEqual([{ runId: 'r', version: 4 }]);
    // Acked: a plain send is swallowed by the day-long deduplication record, a re-drive is not.
    await queue.send({ runId: 'r', version: 4 });
    expect(queue.depth()).toBe(0);
    expect(await queue.redrive({ runId: 'r', version: 4 })).toBe(true);
    const [again] = await queue.receive();
    expect(JSON.parse(again!.body)).toEqual({ runId: 'r', version: 4 });
    w.runtime.close();
  });
});

describe('the worker loop', () => {
  it('re-drives a stuck run by itself: it looks when it starts and then about every 30 s', async () => {
    db = tempDb();
    const w = setup();
    await stuckAfterStep1(w);
    const queue = w.runtime.queue;
    const sweeps: { at: number; found: string[] }[] = [];
    let looped: (() => void) | undefined;
    const consumer: RunQueueConsumer = {
      receive: async (options) => {
        const received = await queue.receive(options);
        looped?.();
        return received;
      },
      ack: (delivery) => queue.ack(delivery),
      release: (delivery, delayMs) => queue.release(delivery, delayMs),
      stalledRuns: async (before, limit) => {
        // The time of the look is the clock when the sweep asks (it reads the clock just before): after
        // the query, the test's loop may already have moved the clock on.
        const at = w.clock.now();
        const runs = await queue.stalledRuns(before, limit);
        sweeps.push({ at, found: runs.map((r) => r.runId) });
        return runs;
      },
    };
    let finished = false;
    const stop = new AbortController();
    const loop = runWorker(w.deps, consumer, {
      waitMs: 10, signal: stop.signal,
      onHandled: (h) => h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status !== 'running',
    }).then(() => { finished = true; });
    const start = w.clock.now();
    // Time passes a second per turn of the loop, so the loop sees every second.
    for (let turn = 0; turn < 120 && !finished; turn++) {
      await Promise.race([new Promise<void>((resolve) => { looped = resolve; }), loop]);
      w.clock.advance(1000);
    }
    stop.abort();
    await loop;

    expect(await loadState(w.runtime)).toMatchObject({ status: 'completed', step: 2 });
    expect(sweeps[0]).toEqual({ at: start, found: [] });
    for (let i = 1; i < sweeps.length; i++) {
      const gap = sweeps[i]!.at - sweeps[i - 1]!.at;
      expect(gap).toBeGreaterThanOrEqual(24_000);
      expect(gap).toBeLessThanOrEqual(37_000);
    }
    // The first look after the stall window re-drove it; none before.
    const found = sweeps.findIndex((s) => s.found.length > 0);
    expect(sweeps[found]).toMatchObject({ found: ['run'] });
    expect(sweeps[found]!.at - start).toBeGreaterThanOrEqual(STALL_MS);
    expect(sweeps[found - 1]!.at - start).toBeLessThanOrEqual(STALL_MS); // a run idle exactly the window is not yet stalled
    w.runtime.close();
  });
});
