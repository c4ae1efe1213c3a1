import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import type { Handled } from '../../lib/engine/handle-message.ts';
import { runWorker, type WorkerOptions } from '../../lib/engine/worker-loop.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { MAX_WORKER_CONCURRENCY } from '../../lib/settings.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const RUNS = 8;
const ROWS = 3;

/** A model that takes `ms` to answer (real time), and counts how many of its calls were awaited at once. */
class SlowModel implements Model {
  readonly name = 'slow-stub';
  private readonly inner = new StubModel(writeRowsScript(ROWS));
  inFlight = 0;
  most = 0;
  /** Called as each call begins, before it waits. */
  onCall?: () => Promise<void>;
  constructor(private readonly ms: number) {}
  async decide(request: ModelRequest): Promise<ModelReply> {
    this.most = Math.max(this.most, ++this.inFlight);
    try {
      await this.onCall?.();
      await sleep(this.ms);
      return await this.inner.decide(request);
    } finally {
      this.inFlight--;
    }
  }
}

/** Works the queue until nothing is visible: no sweep, no wait, heartbeats that never fire this fast. */
const drainOptions = (extra: WorkerOptions = {}): WorkerOptions => ({ visibilityMs: VISIBILITY_MS, waitMs: 0, idleExitMs: 0, sweepEveryMs: 0, ...extra });
/** `run-0:2` for a step a worker checkpointed, undefined for anything else. */
const stepOf = (h: Handled): string | undefined => (h.action === 'ack' && h.outcome?.kind === 'advanced' ? `${h.runId}:${h.outcome.state.step}` : undefined);

describe('a worker running several steps at once (concurrency)', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  const setUp = async (modelMs: number, runsAtStart = RUNS) => {
    db = tempDb();
    const rows = new FakeRows();
    const clock = new ManualClock();
    const model = new SlowModel(modelMs);
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model, clock, workerId: 'A' });
    for (let i = 0; i < runsAtStart; i++) await start(w.deps, `write ${ROWS} rows`, `run-${i}`);
    return { rows, clock, model, w };
  };

  /** Every run completed its rows once each, in order, and nothing is left on the queue. */
  const expectAllDone = async (rows: FakeRows, w: ReturnType<typeof workerProcess>) => {
    for (let i = 0; i < RUNS; i++) {
      const state = await loadState(w.runtime, `run-${i}`);
      expect(state.status).toBe('completed');
      expect(state.steps.map((s) => s.input)).toEqual(Array.from({ length: ROWS }, (_, r) => ({ row: r + 1 })));
    }
    const keys = Array.from({ length: RUNS }, (_, i) => Array.from({ length: ROWS }, (_, s) => `run-${i}/step-${s + 1}`)).flat();
    expect([...rows.rows.keys()].sort()).toEqual(keys.sort());
    expect(rows.received).toHaveLength(RUNS * ROWS);
    expect(w.runtime.queue.depth()).toBe(0);
  };

  it.each([1, 4])('at concurrency %i, eight runs complete, every row written once, and that many steps await the model at once', async (concurrency) => {
    const { rows, model, w } = await setUp(25);
    const steps: string[] = [];
    await runWorker(w.deps, w.runtime.queue, drainOptions({
      concurrency,
      onHandled: (h) => { const step = stepOf(h); if (step) steps.push(step); },
    }));
    await expectAllDone(rows, w);
    // Each run's steps one at a time and in order, whichever loop took them.
    for (let i = 0; i < RUNS; i++) expect(steps.filter((s) => s.startsWith(`run-${i}:`))).toEqual(['1', '2', '3', '3'].map((n) => `run-${i}:${n}`));
    expect(model.most).toBe(concurrency);
    w.runtime.close();
  });

  for (const how of ['signal', 'onHandled', 'a failing loop'] as const) {
    it(`stopped by ${how}, every loop finishes its step and hands back what it received: another worker takes it at once`, async () => {
      const { rows, clock, w } = await setUp(20);
      const stop = new AbortController();
      let handled = 0;
      const run = runWorker(w.deps, w.runtime.queue, drainOptions({
        concurrency: 4,
        signal: stop.signal,
        onHandled: () => {
          if (++handled < 6) return false;
          if (how === 'signal') stop.abort();
          if (how === 'a failing loop') throw new Error('the progress printer broke');
          return true;
        },
      }));
      if (how === 'a failing loop') await expect(run).rejects.toThrow('the progress printer broke');
      else await run;
      // No step was left half-done: the stopped loops' steps all committed (each loop had one in hand).
      expect(handled).toBeGreaterThanOrEqual(6);
      expect(handled).toBeLessThanOrEqual(6 + 3);
      for (const key of rows.rows.keys()) expect(rows.timesReceived(key)).toBe(1);
      w.runtime.close();

      // No time passes: a delivery held and not handed back would be invisible for 30 s, and this drain
      // would end with runs still running.
      const b = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new SlowModel(1), clock: clock.process(), workerId: 'B' });
      await runWorker(b.deps, b.runtime.queue, drainOptions({ concurrency: 2 }));
      await expectAllDone(rows, b);
      b.runtime.close();
    });
  }

  it('with idleExitMs, a loop with nothing to do stays while another steps: runs started meanwhile are taken at once', async () => {
    const { rows, model, w } = await setUp(15, 1);
    // One run at first, so three of the four loops find nothing; the rest start during its first step.
    // A loop that left when it alone found nothing would leave the new runs to the one busy loop.
    let started = false;
    model.onCall = async () => {
      if (started) return;
      started = true;
      for (let i = 1; i < RUNS; i++) await start(w.deps, `write ${ROWS} rows`, `run-${i}`);
    };
    await runWorker(w.deps, w.runtime.queue, drainOptions({ concurrency: 4, idleExitMs: 0 }));
    await expectAllDone(rows, w);
    expect(model.most).toBe(4);
    w.runtime.close();
  });

  it('steps that await nothing (a model and tool that answer at once) still let the process turn: another loop\'s run moves on meanwhile, and a stop asked for by a timer ends the worker at once', async () => {
    db = tempDb();
    const rows = new FakeRows();
    // Far more steps than a turn's interval holds at any speed: before, the busy run reached it first.
    const CAP = 20_000;
    // The run `busy` is answered at once and counts rows (a read-only tool that returns a value): its steps,
    // each with its next message handed over in its commit, never await I/O. `timed` awaits a 5 ms timer.
    const model: Model = {
      name: 'mixed',
      decide: async (request) => {
        if (request.runId === 'busy') return { kind: 'tool', tool: 'count_rows', input: {} };
        await sleep(5);
        return writeRowsScript(ROWS)(request.step);
      },
    };
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows, { stepCap: CAP }), model, clock: new ManualClock(), workerId: 'A' });
    await start(w.deps, 'count the rows again and again', 'busy');
    await start(w.deps, `write ${ROWS} rows`, 'timed');
    const stop = new AbortController();
    let busySteps = 0;
    let busyStepsWhenTimedStepped: number | undefined;
    let busyStepsWhenStopped: number | undefined;
    await runWorker(w.deps, w.runtime.queue, drainOptions({
      concurrency: 2, signal: stop.signal,
      onHandled: (h) => {
        if (h.action !== 'ack' || h.outcome?.kind !== 'advanced') return;
        if (h.runId === 'busy') busySteps++;
        if (h.runId === 'timed' && busyStepsWhenTimedStepped === undefined) {
          busyStepsWhenTimedStepped = busySteps;
          // A timer too, which fires only at a turn: the worker stops at its next step boundary.
          setTimeout(() => { busyStepsWhenStopped = busySteps; stop.abort(); }, 5);
        }
      },
    }));
    // The timer-bound run stepped while the other was still stepping, where its 5 ms timer fired only once
    // the busy run had reached its cap; and the stop came at the step after the timer asked for it.
    expect(busyStepsWhenTimedStepped).toBeDefined();
    expect(busyStepsWhenTimedStepped!).toBeLessThan(CAP);
    expect(busyStepsWhenStopped).toBeDefined();
    expect(busySteps - busyStepsWhenStopped!).toBeLessThanOrEqual(2);
    expect((await loadState(w.runtime, 'busy')).status).toBe('running');
    w.runtime.close();
  });

  it.each([0, 1.5, -1, MAX_WORKER_CONCURRENCY + 1, Number.NaN])('refuses concurrency %s with a clear error, before it receives anything', async (concurrency) => {
    const { w } = await setUp(1);
    const refused = runWorker(w.deps, w.runtime.queue, drainOptions({ concurrency }));
    await expect(refused).rejects.toThrow(`concurrency must be a whole number from 1 to ${MAX_WORKER_CONCURRENCY}`);
    await expect(refused).rejects.toBeInstanceOf(InvalidInputError);
    expect(w.runtime.queue.depth()).toBe(RUNS);
    const [first] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(first!.receiveCount).toBe(1);
    w.runtime.close();
  });

  it.each([
    [{ visibilityMs: Number.NaN }, 'visibilityMs must be a finite number of at least 1, not NaN'],
    [{ visibilityMs: 0 }, 'visibilityMs must be a finite number of at least 1, not 0'],
    [{ waitMs: -1 }, 'waitMs must be a finite number of at least 0, not -1'],
    [{ stallMs: Number.POSITIVE_INFINITY }, 'stallMs must be a finite number of at least 1, not Infinity'],
    [{ maxReceives: 0 }, 'maxReceives must be a finite number of at least 1, not 0'],
  ] as const)('refuses a program\'s option %o with a clear error, before it receives anything', async (option, message) => {
    // A NaN visibility failed the first receive with SQLite's "NOT NULL constraint failed".
    const { w } = await setUp(1);
    const refused = runWorker(w.deps, w.runtime.queue, drainOptions(option));
    await expect(refused).rejects.toThrow(message);
    await expect(refused).rejects.toBeInstanceOf(InvalidInputError);
    expect(w.runtime.queue.depth()).toBe(RUNS);
    w.runtime.close();
  });
});
