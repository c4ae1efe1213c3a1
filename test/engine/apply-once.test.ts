import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition, type ToolContext } from '../../lib/agent.ts';
import { ClaimLostError } from '../../lib/core/errors.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { handleDelivery, type Handled } from '../../lib/engine/handle-message.ts';
import type { LocalRuntime } from '../../lib/local/runtime.ts';
import { HeldEffect } from '../contract/idempotency-ledger-contract.ts';
import { ManualClock, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const LEASE_MS = 60_000;

/**
 * The effects a side-effecting tool starts through ctx.once, on every worker: each entry is one attempt
 * to apply the step's effect. Held entries are finished by the test; once `auto` is set, new ones finish
 * at once.
 */
class Effects {
  readonly entries: { worker: string; at: number; held: HeldEffect<string> }[] = [];
  auto = false;
  applied = 0;
  running = 0;
  maxRunning = 0;

  agent(clock: ManualClock, onceOptions?: { leaseMs?: number }): (worker: string) => AgentDefinition {
    return (worker) => defineAgent({
      name: 'once-agent', tools: [tool({
        name: 'write_row', description: 'writes one row through ctx.once', input: z.object({ row: z.number() }), sideEffect: true,
        run: (input, ctx) => ctx.once(async () => {
          const held = new HeldEffect<string>();
          this.entries.push({ worker, at: clock.now(), held });
          this.running++;
          this.maxRunning = Math.max(this.maxRunning, this.running);
          try {
            const result = this.auto ? `row ${input.row} written by ${worker}` : await held.effect();
            this.applied++;
            return result;
          } finally {
            this.running--;
          }
        }, onceOptions),
      })],
    });
  }
}

/** Waits (without a clock) until something another promise chain does has happened. */
async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !condition(); i++) await new Promise((r) => setImmediate(r));
  expect(condition()).toBe(true);
}

/** Log lines, as JSON objects. */
function capturedLog(): { log: EngineDeps['log']; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { lines, log: pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>); } }) };
}

/**
 * A worker that polls all the time, as a real one does: when nothing is visible, a second passes. Retry
 * delays of 1 s and 2 s are therefore seen as they would be in production.
 */
async function work(deps: EngineDeps, runtime: LocalRuntime, clock: ManualClock, handled: Handled[] = []): Promise<Handled[]> {
  for (let i = 0; i < 10_000; i++) {
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    if (!delivery) {
      if (runtime.queue.depth() === 0) return handled;
      clock.advance(1000);
      continue;
    }
    const result = await handleDelivery(deps, delivery);
    if (result.action === 'ack') await runtime.queue.ack(delivery);
    else await runtime.queue.release(delivery, result.delayMs);
    handled.push(result);
  }
  throw new Error('queue not drained');
}

describe('ctx.once in the engine: one application per key', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('a 70 s effect under a 60 s lease, whose message is redelivered and which then fails, is applied once', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const effects = new Effects();
    const agentFor = effects.agent(clock, { leaseMs: LEASE_MS });
    const proc = (workerId: string, log = capturedLog()) => ({
      log, ...workerProcess({ dbPath: db.path, agent: agentFor(workerId), model: new StubModel(writeRowsScript(1)), clock: clock.process(), workerId }),
    });
    const a = proc('A');
    const b = proc('B');
    const c = proc('C');
    b.deps.log = b.log.log;
    await start(a.deps);

    // Attempt 1 (A) starts the effect, which will take 70 s.
    const [m1] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, m1!);
    await until(() => effects.entries.length === 1);

    // A's message is not heartbeated (its heartbeat failed): at 61 s a second worker gets it.
    clock.advance(61_000);
    const [again] = await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(again?.receiveCount).toBe(2);
    let bHandled: Handled | undefined;
    const bStep = handleDelivery(b.deps, again!).then((h) => { bHandled = h; return h; });
    await until(() => bHandled !== undefined || effects.entries.length === 2);

    // At 70 s, attempt 1 fails.
    clock.advance(9_000);
    effects.entries[0]!.held.fail(new Error('connection reset after 70 s'));
    await aStep;
    effects.auto = true;

    // A third worker takes whatever is queued; then B's attempt, if it ever started, finishes.
    await work(c.deps, c.runtime, clock);
    effects.entries[1]?.held.finish('row 1 written by B');
    const bResult = await bStep;
    if (bResult.action === 'release') await b.runtime.queue.release(again!, bResult.delayMs);
    await work(c.deps, c.runtime, clock);

    expect(effects.applied).toBe(1);
    expect(effects.maxRunning).toBe(1);
    expect(effects.entries.map((e) => e.worker)).toEqual(['A', 'C']);
    // B saw a live claim: it handed the message back until the lease ends and wrote nothing.
    expect(bResult).toMatchObject({ action: 'release', busy: { key: 'run/step-1', leaseUntil: expect.any(Number) } });
    expect((bResult as { delayMs: number }).delayMs).toBeGreaterThanOrEqual(LEASE_MS - 1000);
    expect(b.log.lines).toContainEqual(expect.objectContaining({ event: 'idempotency-key-busy', runId: 'run', key: 'run/step-1' }));
    const state = await loadState(c.runtime);
    expect(state.status).toBe('completed');
    expect(state.steps[0]).toMatchObject({ workerId: 'C', result: { text: 'row 1 written by C' } });
    // Versions: start, A's failed attempt, step 1, DONE. B added none.
    expect((await c.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3, 4]);
    for (const p of [a, b, c]) p.runtime.close();
  });

  it('a worker killed inside ctx.once: the step waits for the lease to end, then completes, and no failure is counted', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const effects = new Effects();
    const agentFor = effects.agent(clock);
    const deadClock = clock.process();
    const a = workerProcess({ dbPath: db.path, agent: agentFor('A'), model: new StubModel(writeRowsScript(1)), clock: deadClock, workerId: 'A' });
    const logB = capturedLog();
    const b = workerProcess({ dbPath: db.path, agent: agentFor('B'), model: new StubModel(writeRowsScript(1)), clock: clock.process(), workerId: 'B' });
    b.deps.log = logB.log;
    await start(a.deps);

    const [m1] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    void handleDelivery(a.deps, m1!);
    await until(() => effects.entries.length === 1);
    // A dies inside the effect: its claim stays, and nothing renews it.
    deadClock.kill();
    a.runtime.close();
    effects.auto = true;

    const handled = await work(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state).toMatchObject({ status: 'completed', step: 1 });
    expect(effects.entries.map((e) => e.worker)).toEqual(['A', 'B']);
    // B ran the effect again only after A's lease ended (A may or may not have applied it: the key is the defence).
    expect(effects.entries[1]!.at).toBeGreaterThanOrEqual(effects.entries[0]!.at + 60_000);
    expect(handled.filter((h) => h.action === 'release').length).toBeGreaterThanOrEqual(1);
    expect(logB.lines.filter((l) => l.event === 'checkpoint' && l.failures)).toEqual([]);
    expect(logB.lines).toContainEqual(expect.objectContaining({ event: 'idempotency-key-busy', runId: 'run', key: 'run/step-1' }));
    // Versions: start, step 1, DONE: the wait wrote no checkpoint.
    expect((await b.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3]);
    b.runtime.close();
  });

  /**
   * Worker A frozen (SIGSTOP, a GC pause) inside its step's effect past its lease and its message's
   * visibility; worker B, on the message's next delivery, inside the effect too, the key taken over.
   */
  async function frozenInsideOnce(effects: Effects) {
    db = tempDb();
    const clock = new ManualClock();
    const agentFor = effects.agent(clock);
    const frozen = clock.process();
    const logA = capturedLog();
    const logB = capturedLog();
    const a = workerProcess({ dbPath: db.path, agent: agentFor('A'), model: new StubModel(writeRowsScript(1)), clock: frozen, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent: agentFor('B'), model: new StubModel(writeRowsScript(1)), clock: clock.process(), workerId: 'B' });
    a.deps.log = logA.log;
    b.deps.log = logB.log;
    await start(a.deps);
    const [m1] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, m1!);
    await until(() => effects.entries.length === 1);
    frozen.freeze();
    clock.advance(LEASE_MS + 1);
    const [again] = await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const bStep = handleDelivery(b.deps, again!);
    await until(() => effects.entries.length === 2);
    return { clock, frozen, a, b, logA, logB, m1: m1!, aStep, bStep };
  }

  it('a worker frozen inside ctx.once past its lease, whose effect then finishes, warns that the effect may have been applied twice', async () => {
    const effects = new Effects();
    const { frozen, a, b, logA, logB, aStep, bStep } = await frozenInsideOnce(effects);
    // A comes back and its effect finishes while B's runs: both may have applied it.
    await frozen.thaw();
    effects.entries[0]!.held.finish('row 1 written by A');
    await aStep;
    expect(logA.lines).toContainEqual(expect.objectContaining({
      level: 30 + 10, event: 'effect-claim-lost', runId: 'run', step: 1, tool: 'write_row', idempotencyKey: 'run/step-1', workerId: 'A',
    }));
    effects.entries[1]!.held.finish('row 1 written by B');
    await bStep;
    // B held the claim throughout: nothing to warn of.
    expect(logB.lines.filter((l) => l.event === 'effect-claim-lost')).toEqual([]);
    a.runtime.close();
    b.runtime.close();
  });

  it('a worker frozen inside ctx.once past its lease, whose effect then fails, counts for nothing: the taker-over commits the step', async () => {
    const effects = new Effects();
    const { clock, frozen, a, b, logA, m1, aStep, bStep } = await frozenInsideOnce(effects);
    // A comes back to find the key B's, and its effect fails (with whatever the tool throws, not the
    // signal's reason): not a try of the step. It writes nothing, so B's checkpoint is not fenced off,
    // and hands its message back for a moment, where a recorded failure would count against the run.
    await frozen.thaw();
    effects.entries[0]!.held.fail(new Error('the write was cut short'));
    expect(await aStep).toEqual({ action: 'release', delayMs: 1000, runId: 'run' });
    expect(logA.lines).toContainEqual(expect.objectContaining({ event: 'claim-taken', runId: 'run', key: 'run/step-1', workerId: 'A' }));
    // A's start was taken back, B's counted: no restart of the step is left.
    const loaded = (await a.runtime.store.load('run'))!;
    expect([loaded.version, loaded.restarts ?? 0]).toEqual([1, 0]);
    await a.runtime.queue.release(m1, 1000);
    effects.entries[1]!.held.finish('row 1 written by B');
    expect(await bStep).toMatchObject({ action: 'ack' });
    effects.auto = true;
    await work(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state).toMatchObject({ status: 'completed', failures: 0 });
    expect(state.steps[0]).toMatchObject({ workerId: 'B', result: { text: 'row 1 written by B' } });
    // Versions: start, B's step 1, DONE: A added none.
    expect((await b.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3]);
    expect(effects.applied).toBe(1);
    a.runtime.close();
    b.runtime.close();
  });

  it('a holder that gives its claim up at every try writes nothing, and the run fails as a crashing worker at the try limit, where it was handed back for ever', async () => {
    db = tempDb();
    const clock = new ManualClock();
    let applied = 0;
    const agent = defineAgent({
      name: 'gives-up', tools: [tool({
        name: 'write_row', description: 'writes one row through ctx.once', input: z.object({ row: z.number() }), sideEffect: true,
        run: (_input, ctx) => ctx.once(async (signal) => { signal.throwIfAborted(); applied++; return 'written'; }),
      })],
    });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    // A store whose renewals are never confirmed (a fault no server here produces on demand): every claim
    // is given up before its effect acts, as by a holder cut off from the store.
    deps.ledger = {
      once: (key, _args, effect) => {
        const given = new AbortController();
        given.abort(new ClaimLostError(key, 'no renewal was confirmed for 40500 ms, after which another attempt may take the key over'));
        return Promise.resolve().then(() => effect(given.signal));
      },
    };
    await start(deps);
    let crashes = 0;
    for (let i = 0; i < 20; i++) {
      const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      if (!delivery) break;
      try {
        const handled = await handleDelivery(deps, delivery);
        await (handled.action === 'ack' ? runtime.queue.ack(delivery) : runtime.queue.release(delivery, handled.delayMs));
      } catch (error) {
        expect(error).toMatchObject({ name: 'ClaimLostError', taken: false });
        crashes++;
        await runtime.queue.release(delivery, 0);
      }
    }
    const state = await loadState(runtime);
    // Its one failure is the crash loop's, recorded by the eleventh start.
    expect(state).toMatchObject({ status: 'failed', failures: 1, reason: expect.stringContaining('it was started 11 times without finishing') });
    expect(crashes).toBe(10);
    expect(applied).toBe(0);
    // The start, then the crash loop's failure: no try wrote a failure of its own.
    expect((await runtime.store.history('run')).map((h) => h.status)).toEqual(['running', 'failed']);
    runtime.close();
  });

  it('ctx.once takes a lease: the claim lasts leaseMs, and a bad lease fails the run with the reason', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const effects = new Effects();
    const a = workerProcess({ dbPath: db.path, agent: effects.agent(clock, { leaseMs: 5_000 })('A'), model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    await start(a.deps);
    const [m1] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, m1!);
    await until(() => effects.entries.length === 1);
    const row = a.runtime.db.prepare("SELECT lease_until FROM ledger WHERE key = 'run/step-1'").get() as { lease_until: number };
    expect(row.lease_until).toBe(effects.entries[0]!.at + 5_000);
    effects.entries[0]!.held.finish('done');
    await aStep;
    a.runtime.close();

    const other = tempDb();
    try {
      const bad = workerProcess({ dbPath: other.path, agent: effects.agent(clock, { leaseMs: 0 })('B'), model: new StubModel(writeRowsScript(1)), clock, workerId: 'B' });
      await start(bad.deps);
      await work(bad.deps, bad.runtime, clock);
      const state = await loadState(bad.runtime);
      expect(state.status).toBe('failed');
      expect(state.reason).toMatch(/leaseMs/);
      expect(effects.entries).toHaveLength(1);
      bad.runtime.close();
    } finally {
      other.cleanup();
    }
  });
});

describe('ctx.once in a step: one effect per key', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  const KEY_BUSY = 'run/step-1';
  it.each([
    ['twice, one after the other', async (ctx: ToolContext, applied: string[]) => {
      const a = await ctx.once(async () => { applied.push('copy'); return 'copied'; });
      const b = await ctx.once(async () => { applied.push('notify'); return 'notified'; });
      return { a, b };
    }, `tool write_row called ctx.once again after its effect under ${KEY_BUSY} was applied: the key keeps that effect's result, so this effect would never run; do both in one ctx.once, or give each its own tool`],
    ['inside its own effect', async (ctx: ToolContext, applied: string[]) => ctx.once(async () => {
      applied.push('copy');
      return ctx.once(async () => { applied.push('notify'); return 'notified'; });
    }), `tool write_row called ctx.once while its ctx.once under ${KEY_BUSY} was still running (inside its effect, or not awaited): a step has one idempotency key, so one effect; do both in one ctx.once, or give each its own tool`],
    ['twice at once', async (ctx: ToolContext, applied: string[]) => Promise.all([
      ctx.once(async () => { applied.push('copy'); return 'copied'; }),
      ctx.once(async () => { applied.push('notify'); return 'notified'; }),
    ]), `tool write_row called ctx.once while its ctx.once under ${KEY_BUSY} was still running (inside its effect, or not awaited): a step has one idempotency key, so one effect; do both in one ctx.once, or give each its own tool`],
  ])('a tool that calls ctx.once %s fails its run at once saying so, where the second effect was skipped or the key taken for another try\'s', async (_how, run, reason) => {
    db = tempDb();
    const clock = new ManualClock();
    const applied: string[] = [];
    const agent = defineAgent({
      name: 'once-twice', tools: [tool({ name: 'write_row', description: 'two effects', input: z.object({ row: z.number() }), sideEffect: true, run: (_input, ctx) => run(ctx, applied) })],
    });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    await start(deps);
    const handled = await work(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'failed', step: 0, reason: `step 1: ${reason}` });
    expect(applied).toEqual(['copy']);
    // Failed at its first delivery: never handed back as though another try held the key.
    expect(handled.map((h) => h.action)).toEqual(['ack']);
    runtime.close();
  });

  it('a ctx.once whose effect failed may be called again in the same try, as a retry of that effect', async () => {
    db = tempDb();
    const clock = new ManualClock();
    let tries = 0;
    const agent = defineAgent({
      name: 'once-again', tools: [tool({
        name: 'write_row', description: 'retries its effect', input: z.object({ row: z.number() }), sideEffect: true,
        run: async (_input, ctx) => {
          const effect = async () => { tries += 1; if (tries === 1) throw new Error('flaky'); return 'written'; };
          return ctx.once(effect).catch(() => ctx.once(effect));
        },
      })],
    });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    await start(deps);
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 1 });
    expect(state.steps[0]!.result.text).toBe('written');
    expect(tries).toBe(2);
    runtime.close();
  });
});

describe('a tool that changes its input', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('changes neither the call recorded nor its ctx.once key\'s input: a retry after a failed try gets the effect\'s result, where it was refused as a reused key', async () => {
    db = tempDb();
    const clock = new ManualClock();
    let tries = 0;
    let applied = 0;
    const agent = defineAgent({
      name: 'input-changer', tools: [tool({
        // z.any() hands back the model's own object: a change to it was a change to the call on record.
        name: 'write_row', description: 'stamps its input', input: z.object({ row: z.number(), meta: z.any() }), sideEffect: true,
        run: async (input, ctx) => {
          tries += 1;
          (input.meta as Record<string, unknown>).stamp = `try ${tries}`;
          const result = await ctx.once(async () => { applied += 1; return 'written'; });
          if (tries === 1) throw new Error('lost the reply after the effect');
          return result;
        },
      })],
    });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'write_row', input: { row: 1, meta: { by: 'model' } } } : { kind: 'done', summary: 'done' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(deps);
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 1 });
    expect(state.steps[0]!.result.text).toBe('written');
    expect(state.steps[0]!.input).toEqual({ row: 1, meta: { by: 'model' } });
    expect({ tries, applied }).toEqual({ tries: 2, applied: 1 });
    runtime.close();
  });
});

describe('ctx.once the tool does not wait for', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  const later = () => new Promise((resolve) => setTimeout(resolve, 20));

  it.each([
    ['completes', async () => { await later(); return 'sent'; }, 'it then completed'],
    ['fails', async () => { await later(); throw new Error('smtp down'); }, 'it then failed: smtp down'],
  ])('a tool that returns while its ctx.once still runs, whose effect then %s, fails its run once the effect has settled, where the step was checkpointed first and a failed effect was never tried again (or crashed the worker unhandled)', async (_how, send, outcome) => {
    db = tempDb();
    const clock = new ManualClock();
    const applied: string[] = [];
    let fixed = false;
    const agent = defineAgent({
      name: 'once-unawaited', tools: [tool({
        name: 'notify', description: 'sends a notice', input: z.object({ row: z.number() }), sideEffect: true,
        run: async (_input, ctx) => {
          const effect = async () => { applied.push('notify'); return fixed ? 'sent' : send(); };
          if (fixed) return ctx.once(effect);
          void ctx.once(effect);
          return 'sent';
        },
      })],
    });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'notify', input: { row: 1 } } : { kind: 'done', summary: 'done' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(deps);
    await work(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({
      status: 'failed', step: 0,
      reason: `step 1: tool notify returned while its ctx.once under run/step-1 was still running (it was not awaited; ${outcome}): its output was made without the effect's outcome, and the step would be checkpointed before the effect was applied, so a failed effect would never be tried again; await it (return await ctx.once(...)). The outcome is kept under the key: a retry after the fix gets its result, or runs a failed effect again`,
    });
    expect(applied).toEqual(['notify']);
    // Fixed and retried: a completed effect is not applied again, a failed one is.
    fixed = true;
    await retryRun(deps, 'run', {});
    await work(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 1 });
    expect(state.steps[0]!.result.text).toBe('sent');
    expect(applied).toEqual(outcome === 'it then completed' ? ['notify'] : ['notify', 'notify']);
    runtime.close();
  });

  it('a ctx.once the tool calls after it returned (from a timer) is refused, its effect not run outside the step', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const applied: string[] = [];
    let late: Promise<unknown> | undefined;
    const agent = defineAgent({
      name: 'once-late', tools: [tool({
        name: 'notify', description: 'sends a notice later', input: z.object({ row: z.number() }), sideEffect: true,
        run: (_input, ctx) => {
          late = later().then(() => ctx.once(async () => { applied.push('notify'); return 'sent'; }));
          return 'scheduled';
        },
      })],
    });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'notify', input: { row: 1 } } : { kind: 'done', summary: 'done' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(deps);
    await work(deps, runtime, clock);
    await expect(late).rejects.toThrow("tool notify called ctx.once under run/step-1 after its try had ended (it had returned or run out of time; a timer or a callback it kept): the effect would run outside the step, after its outcome was taken, and a failure of it would never be tried again; call ctx.once before the tool returns, and await it");
    expect(applied).toEqual([]);
    runtime.close();
  });
});

describe('ctx.once after a tool that threw at once', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('is refused when called later (from a timer), its effect not run outside the step', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const applied: string[] = [];
    let late: Promise<unknown> | undefined;
    const agent = defineAgent({
      name: 'once-after-throw', tools: [tool({
        name: 'notify', description: 'throws, and sends a notice later', input: z.object({ row: z.number() }), sideEffect: true,
        run: (_input, ctx) => {
          if (!late) {
            late = new Promise((resolve) => setTimeout(resolve, 20)).then(() => ctx.once(async () => { applied.push('late'); return 'sent'; }));
            throw new Error('bad row');
          }
          return ctx.once(async () => { applied.push('retry'); return 'sent'; });
        },
      })],
    });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'notify', input: { row: 1 } } : { kind: 'done', summary: 'done' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(deps);
    await work(deps, runtime, clock);
    // A tool that threw synchronously left its try open to ctx.once: the timer's effect ran after it.
    await expect(late).rejects.toThrow('tool notify called ctx.once under run/step-1 after its try had ended');
    expect(applied).toEqual(['retry']);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', step: 1 });
    runtime.close();
  });
});

describe('ctx.once in a tool without side effects', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('fails the run at its first call saying to mark the tool sideEffect: true, where a retry asked the model again and its other call was refused as a reused key', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const fetched: number[] = [];
    const agent = defineAgent({
      name: 'once-read-only', tools: [tool({
        name: 'write_row', description: 'marked read-only, but applies an effect', input: z.object({ row: z.number() }), sideEffect: false,
        run: async (input, ctx) => {
          await ctx.once(async () => { fetched.push(input.row); return 'ok'; });
          if (fetched.length === 1) throw new Error('the connection dropped after the effect');
          return 'written';
        },
      })],
    });
    // Asked again after the failed try (a read-only call is not recorded), the model makes another call.
    let asked = 0;
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'write_row', input: { row: ++asked } } : { kind: 'done', summary: 'done' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(deps);
    await work(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({
      status: 'failed', step: 0,
      reason: 'step 1: tool write_row called ctx.once, but it is not sideEffect: true: its call is not recorded, so a retry asks the model again, whose next call would find the key run/step-1 taken; mark the tool sideEffect: true',
    });
    expect(fetched).toEqual([]);
    runtime.close();
  });
});
