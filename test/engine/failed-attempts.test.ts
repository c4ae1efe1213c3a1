import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type ToolContext } from '../../lib/agent.ts';
import { MAX_ERROR_CHARS, ZERO_USAGE, addUsage, type Usage } from '../../lib/core/state.ts';
import { progressLine } from '../../lib/cli/progress.ts';
import { createLogger } from '../../lib/log.ts';
import type { CrashPoint } from '../../lib/engine/deps.ts';
import { DEFAULT_MAX_RECEIVES, MAX_RETRY_AFTER_MS, failureDelayMs, handleDelivery, retryDelayMs } from '../../lib/engine/handle-message.ts';
import { TransientError } from '../../lib/core/errors.ts';
import type { LocalRuntime } from '../../lib/local/runtime.ts';
import type { CheckpointStore, ModelReply } from '../../lib/ports.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { sleepUntil } from '../../lib/waits/tools.ts';

/**
 * What counts as a failed attempt: only a step that was really tried. Deliveries that never reached the
 * step (the store throttled or locked before the run was even loaded) back off and spend nothing.
 */

const USAGE: Usage = { inputTokens: 100, outputTokens: 20, cacheWriteTokens: 0, cacheReadTokens: 0 };
const times = (n: number): Usage => Array.from({ length: n }).reduce<Usage>((sum) => addUsage(sum, USAGE), { ...ZERO_USAGE });

const throttled = () => Object.assign(new Error('Rate of requests exceeds the allowed throughput'), { name: 'ThrottlingException' });
const locked = () => Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });

/** A store whose load() fails while `failing()` says so: a brownout of the table or a locked database. */
function brownout(store: CheckpointStore, failing: () => boolean, error: () => Error): CheckpointStore {
  return new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (prop === 'load') {
        return async (...args: Parameters<CheckpointStore['load']>) => {
          if (failing()) throw error();
          return target.load(...args);
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * Works the queue as runWorker does: a step that throws (the store failing) hands its message back with
 * the worker loop's growing delay; a simulated crash leaves it in flight, as a dead worker would, until the
 * visibility timeout. When nothing is visible, time jumps to the next message that will be.
 */
async function work(deps: EngineDeps, runtime: LocalRuntime, clock: ManualClock, stopAfter = Infinity): Promise<number> {
  for (let deliveries = 0; deliveries < 500;) {
    if (deliveries >= stopAfter) return deliveries;
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    if (!delivery) {
      const next = runtime.db.prepare('SELECT min(visible_at) AS at FROM queue WHERE acked_at IS NULL').get() as { at: number | null };
      if (next.at === null) return deliveries;
      clock.ms = Math.max(clock.ms, next.at);
      continue;
    }
    deliveries++;
    try {
      const handled = await handleDelivery(deps, delivery);
      if (handled.action === 'ack') await runtime.queue.ack(delivery);
      else await runtime.queue.release(delivery, handled.delayMs);
    } catch (error) {
      if (error instanceof SimulatedCrash) continue;
      await runtime.queue.release(delivery, retryDelayMs(Math.min(delivery.receiveCount, 6)));
    }
  }
  throw new Error('queue not drained after 500 deliveries');
}

describe('only a step that was really tried counts', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  function setup(options: { agent?: ReturnType<typeof rowsAgent>; script?: (step: number, prompt: string) => ModelReply; crashAt?: { point: CrashPoint; step: number } } = {}) {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(options.script ?? writeRowsScript(2));
    const agent = options.agent ?? rowsAgent(new FakeRows());
    return { ...workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W', ...(options.crashAt ? { crashAt: options.crashAt } : {}) }), clock, model };
  }

  it.each([
    ['a throttled table', throttled],
    ['a locked database', locked],
  ])('a brownout of the store (%s) for 14 deliveries spends nothing: the run then completes with no failure counted', async (_label, error) => {
    const { deps, runtime, clock, model } = setup();
    await start(deps);
    let failingLoads = 14;
    const browned = { ...deps, store: brownout(deps.store, () => failingLoads-- > 0, error) };
    const deliveries = await work(browned, runtime, clock);

    expect(deliveries).toBe(14 + 3);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 2, failures: 0 });
    expect(state).not.toHaveProperty('lastError');
    // No model call was spent on the deliveries that could not load the run, and none was asked twice.
    expect(model.stepsAsked()).toEqual([1, 2, 3]);
    expect((await runtime.store.history('run')).map((h) => h.status)).toEqual(['running', 'running', 'running', 'completed']);
  });

  it('a step that keeps killing its worker fails the run after 10 tries, however many deliveries the store lost in between', async () => {
    const tries: number[] = [];
    const agent = defineAgent({
      name: 'crasher', tools: [tool({
        name: 'write_row', description: 'its worker is killed right after it', input: z.object({ row: z.number() }), sideEffect: true,
        run: (_input, ctx) => { tries.push(ctx.attempt); return 'ok'; },
      })],
    });
    const { deps, runtime, clock } = setup({ agent, crashAt: { point: 'C4', step: 1 } });
    await start(deps);
    // After every crash, the next two deliveries find the store throttled.
    let loads = 0;
    const browned = { ...deps, store: brownout(deps.store, () => loads++ % 3 !== 0, throttled) };
    await work(browned, runtime, clock);

    expect(tries).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(tries).toHaveLength(DEFAULT_MAX_RECEIVES);
    expect(await loadState(runtime)).toMatchObject({
      status: 'failed', step: 0, failures: 1,
      reason: `step 1: it was started ${DEFAULT_MAX_RECEIVES + 1} times without finishing (its worker keeps crashing, in or after its recorded call of tool write_row)`,
    });
  });

  it('ctx.attempt tells a tool the truth: a step redone after its worker was killed sees attempt 2, after a recorded failure too', async () => {
    const seen: { step: number; attempt: number }[] = [];
    let failStep2 = true;
    const agent = defineAgent({
      name: 'attempts', tools: [tool({
        name: 'write_row', description: 'records its attempt', input: z.object({ row: z.number() }), sideEffect: true,
        run: (_input, ctx: ToolContext) => {
          seen.push({ step: ctx.step, attempt: ctx.attempt });
          if (ctx.step === 2 && failStep2) { failStep2 = false; throw new Error('the database said no'); }
          return 'ok';
        },
      })],
    });
    db = tempDb();
    const clock = new ManualClock();
    // Worker A is killed inside the tool of step 1, worker B inside the tool of step 2's second attempt.
    const a = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(3)), clock, workerId: 'A', crashAt: { point: 'C4', step: 1 } });
    await start(a.deps);
    await work(a.deps, a.runtime, clock, 1);
    a.runtime.close();
    const b = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(3)), clock, workerId: 'B', crashAt: { point: 'C4', step: 2 } });
    await work(b.deps, b.runtime, clock, 3);
    b.runtime.close();
    const c = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(3)), clock, workerId: 'C' });
    await work(c.deps, c.runtime, clock);

    expect(seen).toEqual([
      { step: 1, attempt: 1 }, { step: 1, attempt: 2 },
      { step: 2, attempt: 1 }, { step: 2, attempt: 2 }, { step: 2, attempt: 3 },
      { step: 3, attempt: 1 },
    ]);
    expect(await loadState(c.runtime)).toMatchObject({ status: 'completed', step: 3 });
    c.runtime.close();
  });
});

describe('the usage of a model call whose reply was discarded is still counted', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  function run(agent: ReturnType<typeof defineAgent>, script: (step: number) => ModelReply) {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(script);
    return { ...workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' }), clock, model };
  }

  function flakyAgent(sideEffect: boolean, failures: number) {
    let left = failures;
    return defineAgent({
      name: 'flaky', tools: [tool({
        name: 'write_row', description: 'fails at first', input: z.object({ row: z.number() }), sideEffect,
        run: () => { if (left-- > 0) throw new Error('try again'); return 'ok'; },
      })],
    });
  }

  const withUsage = (total: number) => (step: number): ModelReply => {
    const reply = writeRowsScript(total)(step);
    return { ...reply, usage: USAGE };
  };

  it('a read-only tool that fails: the model call of the failed attempt is in the run usage', async () => {
    const { deps, runtime, clock, model } = run(flakyAgent(false, 1), withUsage(1));
    await start(deps);
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state.status).toBe('completed');
    // Step 1 was asked twice (a read-only call is asked again), then DONE: three calls, three usages.
    expect(model.requests).toHaveLength(3);
    expect(state.usage).toEqual(times(3));
  });

  it('a side-effecting tool that fails then succeeds: its one model call is counted once, not per attempt', async () => {
    const { deps, runtime, clock, model } = run(flakyAgent(true, 2), withUsage(1));
    await start(deps);
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state.status).toBe('completed');
    expect(model.requests).toHaveLength(2);
    expect(state.usage).toEqual(times(2));
    expect(state.steps[0]!.usage).toEqual(USAGE);
  });

  it('a side-effecting tool that fails the run: its model call is still counted', async () => {
    const { deps, runtime, clock, model } = run(flakyAgent(true, 99), withUsage(1));
    await start(deps);
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'failed', failures: 3 });
    expect(model.requests).toHaveLength(1);
    expect(state.usage).toEqual(times(1));
  });

  // A recorded call whose failed try counted its usage, then asks to wait: the wait counted it again.
  for (const [what, seconds, steps] of [['waits', 60, 2], ['asks for a wait no run may enter', 30 * 86_400, 2]] as const) {
    it(`a side-effecting tool that fails, then ${what}: its one model call is counted once`, async () => {
      let left = 1;
      const agent = defineAgent({
        name: 'flaky-wait', tools: [tool({
          name: 'write_row', description: 'fails at first, then sleeps', input: z.object({ row: z.number() }), sideEffect: true,
          run: (_input, ctx) => { if (left-- > 0) throw new Error('try again'); return sleepUntil().run({ seconds }, ctx); },
        })],
      });
      const { deps, runtime, clock, model } = run(agent, withUsage(1));
      await start(deps);
      await work(deps, runtime, clock);
      const state = await loadState(runtime);
      expect(state).toMatchObject({ status: 'completed', step: 1 });
      // Step 1's call and the DONE reply: two calls, each counted once.
      expect(model.requests).toHaveLength(steps);
      expect(state.usage).toEqual(times(steps));
      expect(state.steps[0]!.usage).toEqual(USAGE);
    });
  }

  it('unusable replies, unknown tools and invalid arguments: every call is counted', async () => {
    const replies: ModelReply[] = [
      { kind: 'invalid', reason: 'two tool calls', usage: USAGE },
      { kind: 'tool', tool: 'drop_table', input: {}, usage: USAGE },
      { kind: 'tool', tool: 'write_row', input: { row: 'x' }, usage: USAGE },
      { kind: 'done', summary: 'gave up', usage: USAGE },
    ];
    const { deps, runtime, clock } = run(flakyAgent(false, 0), () => replies.shift()!);
    await start(deps);
    await work(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', usage: times(4) });
  });
});

describe('the step cap', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('a goal finished in exactly stepCap steps ends completed, not capped', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(writeRowsScript(3));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows(), { stepCap: 3 }), model, clock, workerId: 'W' });
    await start(deps);
    await work(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', step: 3, summary: 'Wrote 3 rows, one per step.' });
    expect(model.stepsAsked()).toEqual([1, 2, 3, 4]);
  });

  it('a tool call at step cap + 1 caps the run without running the tool, and its usage is counted', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const model = new StubModel(writeRowsScript(100));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows, { stepCap: 3 }), model, clock, workerId: 'W' });
    await start(deps);
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'capped', step: 3, reason: 'step cap of 3 reached before the goal was done' });
    expect(rows.received).toEqual(['run/step-1', 'run/step-2', 'run/step-3']);
    expect(model.stepsAsked()).toEqual([1, 2, 3, 4]);
    expect(state.usage).toEqual(times(4));
  });
});

describe('a failed try that asks for a retry-after', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /** write_row fails its first try with a TransientError asking for `retryAfterMs`, then writes. */
  function rateLimited(retryAfterMs: number) {
    db = tempDb();
    const clock = new ManualClock();
    let left = 1;
    const agent = defineAgent({
      name: 'rate-limited', tools: [tool({
        name: 'write_row', description: 'an API that rate-limits', input: z.object({ row: z.number() }), sideEffect: true,
        run: () => { if (left-- > 0) throw new TransientError('the API is rate limited', { retryAfterMs }); return 'ok'; },
      })],
    });
    return { ...workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(1)), clock, workerId: 'W' }), clock };
  }

  /** When the run's next message becomes visible, after the failed try at `at`. */
  const nextVisibleAfter = (runtime: LocalRuntime, at: number) =>
    (runtime.db.prepare('SELECT min(visible_at) AS at FROM queue WHERE acked_at IS NULL').get() as { at: number }).at - at;

  it.each([
    { asked: 90_000, waited: 90_000 },
    // Shorter than the backoff: the backoff (1 s at the first failure).
    { asked: 200, waited: 1_000 },
    // A date a day off is not believed: the longest wait is MAX_RETRY_AFTER_MS.
    { asked: 86_400_000, waited: MAX_RETRY_AFTER_MS },
  ])('a tool asking for $asked ms: the next try waits $waited ms, and the run then completes', async ({ asked, waited }) => {
    const { deps, runtime, clock } = rateLimited(asked);
    await start(deps);
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const at = clock.now();
    const handled = await handleDelivery(deps, delivery!);
    expect(handled).toMatchObject({ action: 'ack', acked: true, outcome: { state: { failures: 1, lastError: 'the API is rate limited' } } });
    expect(nextVisibleAfter(runtime, at)).toBe(waited);
    await work(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', step: 1, failures: 0 });
  });

  it('failureDelayMs: the backoff unless the failure asked for longer, never past MAX_RETRY_AFTER_MS', () => {
    expect(MAX_RETRY_AFTER_MS).toBe(15 * 60_000);
    expect(failureDelayMs(0, 5_000)).toBe(0);
    expect(failureDelayMs(3)).toBe(4_000);
    expect(failureDelayMs(3, 2_500)).toBe(4_000);
    expect(failureDelayMs(3, 7_000.2)).toBe(7_001);
    expect(failureDelayMs(1, Number.MAX_SAFE_INTEGER)).toBe(MAX_RETRY_AFTER_MS);
    // A retry-after that is not a positive finite number is none.
    expect(new TransientError('x', { retryAfterMs: Number.NaN }).retryAfterMs).toBeUndefined();
    expect(new TransientError('x', { retryAfterMs: -5 }).retryAfterMs).toBeUndefined();
    expect(new TransientError('x').retryAfterMs).toBeUndefined();
  });
});

describe('a tool that throws with a huge message', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('keeps the start of it as the last error and the reason: checkpoints, their log lines and the progress lines stay small', async () => {
    db = tempDb();
    const clock = new ManualClock();
    // A shell tool's failure with the command's whole output in it, say.
    const output = `command failed:\n${'line of output\n'.repeat(200_000)}`;
    const agent = defineAgent({
      name: 'loud', tools: [tool({ name: 'write_row', description: 'fails loudly', input: z.object({ row: z.number() }), sideEffect: false, run: () => { throw new Error(output); } })],
    });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(1)), clock, workerId: 'W' });
    const lines: string[] = [];
    deps.log = createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } });
    const progress: string[] = [];
    await start(deps);
    for (let tries = 0; tries < 3; tries++) {
      const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      const handled = await handleDelivery(deps, delivery!);
      const line = progressLine(handled);
      if (line) progress.push(line);
      clock.advance(60_000);
    }
    const state = await loadState(runtime);

    const kept = `${output.slice(0, MAX_ERROR_CHARS)}… (${output.length} characters in all)`;
    expect(state).toMatchObject({ status: 'failed', failures: 3, lastError: kept, reason: `step 1 failed 3 times; last error: ${kept}` });
    expect(lines.map((line) => JSON.parse(line) as { event: string; error?: string; bytes: number })).toMatchObject([
      { event: 'checkpoint' }, { event: 'checkpoint', error: kept }, { event: 'checkpoint', error: kept }, { event: 'checkpoint', error: kept },
    ]);
    expect(progress).toHaveLength(3);
    for (const line of [...lines, ...progress]) expect(line.length).toBeLessThan(3 * MAX_ERROR_CHARS);
  });
});

describe('a tool that throws naming a URL with credentials', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('masks them in the last error, the reason, the checkpoints and the progress lines, as log lines do', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const thrown = 'connect ECONNREFUSED for postgres://admin:hunter2@db.internal:5432/app?sslmode=require&access_token=tok123';
    const agent = defineAgent({
      name: 'leaky', tools: [tool({ name: 'write_row', description: 'fails naming its URL', input: z.object({ row: z.number() }), sideEffect: false, run: () => { throw new Error(thrown); } })],
    });
    const model = new StubModel(writeRowsScript(1));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    const progress: string[] = [];
    await start(deps);
    for (let tries = 0; tries < 3; tries++) {
      const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      const line = progressLine(await handleDelivery(deps, delivery!));
      if (line) progress.push(line);
      clock.advance(60_000);
    }
    const state = await loadState(runtime);
    const masked = 'connect ECONNREFUSED for postgres://***@db.internal:5432/app?sslmode=require&access_token=***';
    expect(state).toMatchObject({ status: 'failed', lastError: masked, reason: `step 1 failed 3 times; last error: ${masked}` });
    expect(progress.join('\n')).toContain(masked);
    const stored = runtime.db.prepare('SELECT group_concat(head) AS heads FROM checkpoints').get() as { heads: string };
    for (const text of [...progress, ...model.requests.map((r) => r.prompt), stored.heads]) {
      expect(text).not.toContain('hunter2');
      expect(text).not.toContain('tok123');
    }
  });
});
