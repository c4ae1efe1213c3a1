import { afterEach, describe, expect, it, vi } from 'vitest';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const HOUR_MS = 3_600_000;

/**
 * The machine's clock stepped (NTP, a VM restored, a laptop's clock set by hand) while a worker runs. What a
 * worker times within its own process (when to sweep next, how long it has been idle, how long a poll
 * lasts) is a span of its own life, not a point on the wall clock.
 */
describe('worker loop: the system clock steps', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => {
    vi.restoreAllMocks();
    db?.cleanup();
  });

  const worker = () => workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });

  /** From now on Date.now() reads `by` ms off (performance.now() and the timers go on as they were). */
  const stepClock = (by: number) => {
    const real = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => real() + by);
  };

  it('an hour back: an idle worker sweeps on, where it swept again only once the clock had caught up (an hour with no stalled run re-driven, no wait timer sent on AWS)', { timeout: 60_000 }, async () => {
    db = tempDb();
    const w = worker();
    // The engine's clock is the system's here, as in production.
    const deps = { ...w.deps, clock: { now: () => Date.now() } };
    const stop = new AbortController();
    // Not a timing: a worker that never sweeps again is stopped here, and the count below fails.
    const guard = setTimeout(() => stop.abort(), 20_000);
    let sweeps = 0;
    await runWorker(deps, w.runtime.queue, {
      waitMs: 1000, sweepEveryMs: 200, signal: stop.signal,
      sweep: async () => {
        sweeps++;
        if (sweeps === 1) stepClock(-HOUR_MS);
        if (sweeps === 2) stop.abort();
      },
    });
    clearTimeout(guard);
    expect(sweeps).toBe(2);
    w.runtime.close();
  });

  it('an hour forward: an idle worker with --idle-exit-ms of a minute is not stopped as idle at once, as though it had been idle that hour', { timeout: 60_000 }, async () => {
    db = tempDb();
    const w = worker();
    const deps = { ...w.deps, clock: { now: () => Date.now() } };
    const stop = new AbortController();
    let sweeps = 0;
    let returned = false;
    const worked = runWorker(deps, w.runtime.queue, {
      waitMs: 50, sweepEveryMs: 1, idleExitMs: 60_000, signal: stop.signal,
      sweep: async () => { if (++sweeps === 1) stepClock(HOUR_MS); },
    }).then(() => { returned = true; });
    // A few polls after the step: the worker has been idle a moment, not a minute.
    await vi.waitFor(() => expect(returned || sweeps > 3).toBe(true), { timeout: 20_000 });
    expect(returned).toBe(false);
    stop.abort();
    await worked;
    w.runtime.close();
  });

  it('an hour back during a poll of the local queue: the poll ends after its waitMs, where it polled on for the hour', { timeout: 60_000 }, async () => {
    db = tempDb();
    const w = worker();
    const stop = new AbortController();
    // Not a timing: a poll that goes on for the hour is cut here, and the count below fails.
    const guard = setTimeout(() => stop.abort(), 20_000);
    let polls = 0;
    const poll = vi.spyOn(w.runtime.queue as unknown as { takeUnlessLocked: () => unknown }, 'takeUnlessLocked');
    poll.mockImplementation(() => {
      if (++polls === 1) stepClock(-HOUR_MS);
      return [];
    });
    expect(await w.runtime.queue.receive({ waitMs: 300, signal: stop.signal })).toEqual([]);
    expect(stop.signal.aborted).toBe(false);
    clearTimeout(guard);
    w.runtime.close();
  });
});
