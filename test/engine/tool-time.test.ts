import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import { InvalidInputError, ToolTimeoutError } from '../../lib/core/errors.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { ToolTime } from '../../lib/engine/tool-time.ts';
import { DEFAULT_TOOL_TIMEOUT_MS } from '../../lib/settings.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

/**
 * A tool's time in one try of its step: past `timeoutMs` the try fails (tried again, up to 3), its
 * `ctx.signal` aborts, and the worker goes on, where a tool that never settled held its run, and its
 * worker, for good. Real timers: the limits are tens of milliseconds.
 */
const callTool = (name: string) => (): ModelReply => ({ kind: 'tool', tool: name, input: {} });
const never = () => new Promise<never>(() => {});
/** The signals Node keeps made from this one (by AbortSignal.any), which live until it aborts. */
const dependants = (signal: AbortSignal): number => {
  const key = Object.getOwnPropertySymbols(signal).find((symbol) => symbol.description === 'kDependantSignals');
  return key ? (signal as unknown as Record<symbol, Set<unknown>>)[key]!.size : 0;
};

describe('a tool held to its time', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  function setup(agent: AgentDefinition, script: (step: number) => ModelReply, clock = new ManualClock()) {
    db = tempDb();
    return { ...workerProcess({ dbPath: db.path, agent, model: new StubModel(script), clock, workerId: 'W' }), clock };
  }

  it('one that never settles fails its try at timeoutMs with ctx.signal aborted, and its run after 3 tries, with the reason', async () => {
    const signals: AbortSignal[] = [];
    const agent = defineAgent({
      name: 'hangs',
      tools: [tool({ name: 'hang', description: 'never returns', input: z.object({}), sideEffect: false, timeoutMs: 40, run: (_input, ctx) => { signals.push(ctx.signal); return never(); } })],
    });
    const { deps, runtime, clock } = setup(agent, callTool('hang'));
    await start(deps);
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const handled = await handleDelivery(deps, delivery!);
    // The try ended as a failed try: the message is acked and the step's next try queued with the backoff.
    expect(handled.action).toBe('ack');
    const after = await loadState(runtime);
    expect(after).toMatchObject({ status: 'running', failures: 1, lastError: 'tool hang did not finish within 40 ms (its timeoutMs)' });
    expect(signals[0]!.aborted).toBe(true);
    expect(signals[0]!.reason).toBeInstanceOf(ToolTimeoutError);

    await drain(deps, runtime, clock);
    const failed = await loadState(runtime);
    expect(failed).toMatchObject({ status: 'failed', failures: 3, reason: expect.stringContaining('tool hang did not finish within 40 ms (its timeoutMs)') });
    expect(failed.steps).toHaveLength(0);
    expect(signals).toHaveLength(3);
    expect(signals.every((s) => s.aborted)).toBe(true);
  });

  it('one that finishes in time is untouched: its result is the step\'s, and its signal never aborts', async () => {
    let signal: AbortSignal | undefined;
    const agent = defineAgent({
      name: 'quick',
      tools: [tool({
        name: 'wait_a_little', description: 'resolves after 5 ms', input: z.object({}), sideEffect: false, timeoutMs: 5_000,
        run: async (_input, ctx) => { signal = ctx.signal; await new Promise((r) => setTimeout(r, 5)); return { waited: true }; },
      })],
    });
    const { deps, runtime, clock } = setup(agent, (step) => (step === 1 ? callTool('wait_a_little')() : { kind: 'done', summary: 'waited' }));
    await start(deps);
    await drain(deps, runtime, clock);
    const done = await loadState(runtime);
    expect(done).toMatchObject({ status: 'completed', failures: 0 });
    expect(done.steps[0]!.result).toMatchObject({ ok: true, text: '{"waited":true}' });
    expect(signal!.aborted).toBe(false);
  });

  it('a tool that hangs inside ctx.once stops renewing its claim at the limit: the next try takes the key when the lease ends', async () => {
    let calls = 0;
    const clock = new ManualClock();
    const agent = defineAgent({
      name: 'hangs-in-once',
      tools: [tool({
        name: 'charge', description: 'an effect that hangs the first time', input: z.object({}), sideEffect: true, timeoutMs: 40,
        run: (_input, ctx) => ctx.once(async (signal) => {
          calls++;
          if (calls === 1) return new Promise((_resolve, reject) => signal.addEventListener('abort', () => setTimeout(() => reject(signal.reason), 1_000_000)));
          return { charged: true };
        }, { leaseMs: 5_000 }),
      })],
    });
    const { deps, runtime } = setup(agent, (step) => (step === 1 ? callTool('charge')() : { kind: 'done', summary: 'charged' }), clock);
    await start(deps);
    const [first] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await handleDelivery(deps, first!);
    expect(await loadState(runtime)).toMatchObject({ failures: 1, lastError: 'tool charge did not finish within 40 ms (its timeoutMs)' });

    // Its claim is still there, unrenewed: a try inside the lease is told to wait (no try counted)...
    clock.advance(2_000);
    const [second] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const waiting = await handleDelivery(deps, second!);
    expect(waiting).toMatchObject({ action: 'release' });
    expect((await loadState(runtime)).failures).toBe(1);
    await runtime.queue.release(second!, 0);
    // ...and once the lease has run out, the next try runs the effect and the run completes.
    clock.advance(5_000);
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', steps: [expect.objectContaining({ tool: 'charge', result: expect.objectContaining({ ok: true }) })] });
    expect(calls).toBe(2);
  });

  it('the worker\'s own deadline (a Lambda\'s remaining time) ends the try too', async () => {
    const agent = defineAgent({
      name: 'hangs-past-deadline',
      tools: [tool({ name: 'hang', description: 'never returns', input: z.object({}), sideEffect: false, run: () => never() })],
    });
    const { deps, runtime } = setup(agent, callTool('hang'));
    await start(deps);
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await handleDelivery({ ...deps, signal: AbortSignal.timeout(30) }, delivery!);
    expect(await loadState(runtime)).toMatchObject({ failures: 1, lastError: "tool hang had not finished when the worker's own deadline came" });
  });

  it('past the worker\'s deadline already, the tool is not started only to be abandoned', async () => {
    let started = 0;
    const agent = defineAgent({
      name: 'late',
      tools: [tool({ name: 'late_tool', description: 'counts its starts', input: z.object({}), sideEffect: false, run: async () => { started++; return 'ran'; } })],
    });
    const { deps, runtime } = setup(agent, callTool('late_tool'));
    await start(deps);
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const past = new AbortController();
    past.abort();
    await handleDelivery({ ...deps, signal: past.signal }, delivery!);
    expect(started).toBe(0);
    expect(await loadState(runtime)).toMatchObject({ failures: 1, lastError: "tool late_tool had not finished when the worker's own deadline came" });
  });

  it('once\'s signal follows both the try\'s time and a signal the caller gave', async () => {
    const hangs = tool({ name: 'h', description: 'd', input: z.object({}), sideEffect: true, timeoutMs: 20, run: () => never() });
    const own = new AbortController();
    const first = new ToolTime(hangs);
    const mine = first.onceSignal(own.signal).signal;
    own.abort(new Error('mine'));
    expect(mine.aborted && (mine.reason as Error).message).toBe('mine');

    const second = new ToolTime(hangs);
    const theirs = second.onceSignal(new AbortController().signal).signal;
    await expect(second.run(() => never())).rejects.toBeInstanceOf(ToolTimeoutError);
    expect(theirs.aborted).toBe(true);
    expect(theirs.reason).toBeInstanceOf(ToolTimeoutError);
    // Made only when asked for: asked for after the try ended, it comes already aborted.
    const third = new ToolTime(hangs);
    await expect(third.run(() => never())).rejects.toBeInstanceOf(ToolTimeoutError);
    expect(third.signal.aborted).toBe(true);
    expect(third.onceSignal(undefined).signal).toBe(third.signal);
  });

  it('a signal the program keeps for its life, given to every step\'s once, keeps nothing of any step once it has ended', async () => {
    // Node 20's AbortSignal.any left each signal it made in its sources' keeping until they abort: one more
    // for every step, for the worker's life (a heap that grew 45 bytes a step and never levelled off).
    const shutdown = new AbortController();
    const agent = defineAgent({
      name: 'keeps', settings: { stepCap: 40 },
      tools: [tool({ name: 'apply', description: 'applies once', input: z.object({}), sideEffect: true, run: (_input, ctx) => ctx.once(async () => 'applied', { signal: shutdown.signal }) })],
    });
    const { deps, runtime, clock } = setup(agent, callTool('apply'));
    await start(deps);
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'capped', steps: expect.toSatisfy((steps: unknown[]) => steps.length === 40) });
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
    expect(dependants(shutdown.signal)).toBe(0);
  });

  it('defineAgent refuses a timeoutMs no timer can hold; the default is a Lambda invocation\'s longest', () => {
    for (const timeoutMs of [0, -1, 1.5, 2 ** 31, Number.NaN]) {
      expect(() => defineAgent({ name: 'a', tools: [tool({ name: 't', description: 'd', input: z.object({}), sideEffect: false, timeoutMs, run: () => 1 })] }))
        .toThrow(new InvalidInputError(`tool t: timeoutMs must be a whole number of milliseconds from 1 to 2147483647, got ${timeoutMs}`));
    }
    expect(DEFAULT_TOOL_TIMEOUT_MS).toBe(15 * 60 * 1000);
  });
});
