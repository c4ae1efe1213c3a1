import { afterEach, describe, expect, it } from 'vitest';
import { defineAgent } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { summariesDue } from '../../lib/core/condensed.ts';
import type { RunState } from '../../lib/core/state.ts';
import { completeStep, initialState } from '../../lib/core/transitions.ts';
import { advance } from '../../lib/engine/advance.ts';
import { loadAsResumed } from '../../lib/engine/operate/load.ts';
import { showRun } from '../../lib/engine/operate/show.ts';
import { stepCacheOf } from '../../lib/engine/step-cache.ts';
import { blockCost, unheldBlocksPriced } from '../../lib/llm/cost.ts';
import { META, recordFor } from '../support/states.ts';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { runCost } from '../../lib/llm/cost.ts';
import { startRun } from '../../lib/engine/start.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/** writeRowsScript, but every reply says which model answered and uses 100,000 input tokens. */
function pricedScript(total: number, model = 'claude-opus-5-5') {
  return (step: number): ModelReply => step <= total
    ? { kind: 'tool', tool: 'write_row', input: { row: step }, model, usage: { inputTokens: 100_000, outputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0 } }
    : { kind: 'done', summary: 'done', model };
}

describe('budgets', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  function setup(script: (step: number) => ModelReply, agent = rowsAgent(new FakeRows())) {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(script);
    const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    return { ...w, clock, model };
  }

  it('a token budget stops the run before the model call that would go past it; retry with a raised budget continues it', async () => {
    const { deps, runtime, clock, model } = setup(writeRowsScript(5));
    await startRun(deps, { goal: 'write the rows', runId: 'run', budget: { tokens: 300 } });
    await drain(deps, runtime, clock);
    const stopped = await loadState(runtime);
    // 120 tokens a step: after step 3 the run has used 360, so step 4 never asks the model.
    expect(stopped).toMatchObject({ status: 'over-budget', step: 3, budget: { tokens: 300 }, reason: 'token budget of 300 reached: 360 tokens used' });
    expect(model.stepsAsked()).toEqual([1, 2, 3]);
    expect((await runtime.store.history('run')).at(-1)).toMatchObject({ status: 'over-budget', step: 3 });
    expect((await runtime.store.list({ status: 'over-budget' })).map((r) => r.runId)).toEqual(['run']);

    // Said for the API's callers too, who give a budget in the body, not with flags.
    await expect(retryRun(deps, 'run', {})).rejects.toThrow('would stop again at once: token budget of 300 reached: 360 tokens used; raise it with --budget-tokens or --budget-usd (in the API, "budget": {"tokens", "usd"}; in the inspector, the token or dollar budget)');
    await expect(retryRun(deps, 'run', { budget: { tokens: 360 } })).rejects.toThrow(/would stop again at once/);
    expect(await retryRun(deps, 'run', { budget: { tokens: 1000 } })).toMatchObject({ from: 'over-budget', budget: { tokens: 1000 } });
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', step: 5, budget: { tokens: 1000 } });
    expect(model.stepsAsked()).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('a dollar budget is checked against the estimate from the recorded usage and the price table', async () => {
    const { deps, runtime, clock, model } = setup(pricedScript(5));
    await startRun(deps, { goal: 'write the rows', runId: 'run', budget: { usd: 1 } });
    await drain(deps, runtime, clock);
    // claude-opus-5-5 input is $4 per million: $0.40 a step, so the fourth step would start past $1.
    expect(await loadState(runtime)).toMatchObject({ status: 'over-budget', step: 3, reason: 'dollar budget of $1 reached: an estimated $1.2000 spent' });
    expect(model.stepsAsked()).toEqual([1, 2, 3]);
    await retryRun(deps, 'run', { budget: { usd: 5 } });
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', step: 5, budget: { usd: 5 } });
  });

  it('a dollar budget that cannot be priced stops the run instead of letting it spend without limit', async () => {
    const { deps, runtime, clock, model } = setup(pricedScript(5, 'some-unpriced-model'));
    await startRun(deps, { goal: 'write the rows', runId: 'run', budget: { usd: 100 } });
    await drain(deps, runtime, clock);
    // The reason names the model, so the fix is plain: a model id the price table does not know.
    expect(await loadState(runtime)).toMatchObject({ status: 'over-budget', step: 1, reason: 'dollar budget of $100 cannot be checked: some of the usage is of model some-unpriced-model, which has no known price' });
    expect(model.stepsAsked()).toEqual([1]);
  });

  it('usage from a model that names none is priced by the worker\'s model everywhere: the budget, retry and the cost agree', async () => {
    // A model of the program's own (its name `stub`): replies with usage, no model id.
    const { deps, runtime, clock } = setup((step) => step <= 5
      ? { kind: 'tool', tool: 'write_row', input: { row: step }, usage: { inputTokens: 1000, outputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0 } }
      : { kind: 'done', summary: 'done' });
    await startRun(deps, { goal: 'write the rows', runId: 'run', budget: { usd: 100 } });
    await drain(deps, runtime, clock);
    const stopped = await loadState(runtime);
    expect(stopped).toMatchObject({ status: 'over-budget', step: 1, reason: 'dollar budget of $100 cannot be checked: some of the usage is of model stub, which has no known price' });
    expect(stopped.steps[0]!.model).toBe('stub');
    // What `status` shows and `retry` checks, with the CLI's default pricing model: not priced at it.
    expect(runCost(stopped, 'claude-opus-5-5')).toMatchObject({ priced: false, usd: 0 });
    await expect(retryRun(deps, 'run', { budget: { usd: 500 }, pricingModel: 'claude-opus-5-5' })).rejects.toThrow('would stop again at once: dollar budget of $500 cannot be checked: some of the usage is of model stub, which has no known price');
  });

  it('the budget comes from the agent\'s settings unless the start gives one; bad budgets are refused', async () => {
    const base = rowsAgent(new FakeRows());
    const agent = defineAgent({ ...base, settings: { ...base.settings, budget: { tokens: 200 } } });
    const { deps, runtime, clock } = setup(writeRowsScript(5), agent);
    await start(deps, 'from settings', 'a');
    await startRun(deps, { goal: 'from the start', runId: 'b', budget: { tokens: 500 } });
    await drain(deps, runtime, clock);
    expect(await loadState(runtime, 'a')).toMatchObject({ status: 'over-budget', step: 2, budget: { tokens: 200 } });
    expect(await loadState(runtime, 'b')).toMatchObject({ status: 'over-budget', step: 5, budget: { tokens: 500 } });
    await expect(startRun(deps, { goal: 'x', runId: 'c', budget: { tokens: -1 } })).rejects.toThrow(/budget tokens/);
    await expect(startRun(deps, { goal: 'x', runId: 'c', budget: { usd: 0 } })).rejects.toThrow(/budget usd/);
    expect(await runtime.store.load('c')).toBeUndefined();
  });

  it('refuses a budget with a part it does not know at start, fork and retry, where the run got no limit', async () => {
    const { deps, runtime, clock } = setup(writeRowsScript(5));
    await startRun(deps, { goal: 'stop early', runId: 'small', budget: { tokens: 10 } });
    await drain(deps, runtime, clock);
    expect(await loadState(runtime, 'small')).toMatchObject({ status: 'over-budget' });
    // As a program passes it untyped: the API and an agent's settings refuse it, the engine's calls did not.
    const dollars = { dollars: 5 } as never;
    const refusal = 'budget: Unrecognized key: "dollars" (tokens: a whole number above 0; usd: a number above 0)';
    await expect(startRun(deps, { goal: 'x', runId: 'c', budget: dollars })).rejects.toThrow(refusal);
    await expect(forkRun(deps, 'small', { fromStep: 0, runId: 'd', budget: dollars })).rejects.toThrow(refusal);
    await expect(retryRun(deps, 'small', { budget: dollars })).rejects.toThrow(refusal);
    expect(await runtime.store.load('c')).toBeUndefined();
    expect(await runtime.store.load('d')).toBeUndefined();
    expect(await loadState(runtime, 'small')).toMatchObject({ status: 'over-budget', budget: { tokens: 10 } });
  });

  it('a long run at its dollar budget is found at it alike from its block summaries (a worker) and from every record (fork, retry, show)', async () => {
    const { deps, runtime } = setup(pricedScript(1000));
    // 412 steps of claude-opus-5-5 at 10 input and 2 output tokens, $0.00008 each: $0.03296 in all, which
    // the budget is. Summed record by record the floats came to $0.03296, from the three block summaries'
    // sums and the 112 records after them to $0.032959999999999996, so the worker asked for step 413.
    const usage = { inputTokens: 10, outputTokens: 2, cacheWriteTokens: 0, cacheReadTokens: 0 };
    let state: RunState = { ...initialState({ runId: 'long', agent: deps.agent.name, goal: 'write the rows', stepCap: 1000, now: 1_000 }), budget: { usd: 0.03296 } };
    await runtime.store.create(state, META);
    for (let n = 1; n <= 412; n++) {
      const record = { ...recordFor('long', n), usage, model: 'claude-opus-5-5' };
      state = completeStep(state, record, 2_000 + n);
      const summaries = summariesDue(state, blockCost);
      await runtime.store.commit({ runId: 'long', expectedVersion: n, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META });
    }
    const bounded = decodeState((await runtime.store.load('long', { recent: true }))!);
    expect(bounded.stepsFrom).toBe(300);
    // Both reads give one figure: the whole run's (show) and the one a worker and GET /runs/:id make.
    expect((await showRun(runtime, 'long')).cost.usd).toBe(runCost(bounded, 'claude-opus-5-5').usd);
    // The worker, reading the summaries and the records after them, stops the run before step 413.
    expect(await advance(deps, 'long')).toMatchObject({ kind: 'advanced', state: { status: 'over-budget', step: 412, reason: 'dollar budget of $0.03296 reached: an estimated $0.0330 spent' } });
    // As a retry and a fork, which read every record, find it: at the same budget, each would stop at once.
    await expect(retryRun(deps, 'long', {})).rejects.toThrow(/would stop again at once/);
    await expect(forkRun(deps, 'long', { fromStep: 412, runId: 'at-412' })).rejects.toThrow(/would stop at once/);
  });

  it('a long run whose block summaries found no price for a model this code prices is read whole by its budget, not stopped as unpriced', async () => {
    const { deps, runtime } = setup(pricedScript(1000));
    // 305 steps of claude-opus-5-5, with no budget, their first two blocks summarised by a release whose price
    // table did not have the model yet: each block's cost says it could not be priced.
    const usage = { inputTokens: 10, outputTokens: 2, cacheWriteTokens: 0, cacheReadTokens: 0 };
    let state: RunState = { ...initialState({ runId: 'long', agent: deps.agent.name, goal: 'write the rows', stepCap: 305, now: 1_000 }) };
    await runtime.store.create(state, META);
    for (let n = 1; n <= 305; n++) {
      const record = { ...recordFor('long', n), usage, model: 'claude-opus-5-5' };
      state = completeStep(state, record, 2_000 + n);
      const summaries = summariesDue(state).map((b) => ({ ...b, cost: { usd: 0, uncachedUsd: 0, unpriced: ['claude-opus-5-5'], model: 'claude-opus-5-5' } }));
      await runtime.store.commit({ runId: 'long', expectedVersion: n, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META });
    }
    await runtime.store.commit({ runId: 'long', expectedVersion: 306, state: { ...state, status: 'capped', reason: 'step cap of 305 reached' }, ...META });
    // Read whole, this code prices every record: $0.0244 of a $1 budget, which the retry takes.
    await retryRun(deps, 'long', { stepCap: 400, budget: { usd: 1 } });
    // Its worker must not stop it as unpriced from those summaries, and its cost is one figure on each read.
    expect(await advance(deps, 'long')).toMatchObject({ kind: 'advanced', state: { status: 'running', step: 306 } });
    // Having read every record once, its worker holds the blocks priced by this code, not the records.
    const priced = { usd: expect.closeTo(0.008, 12), uncachedUsd: expect.closeTo(0.008, 12), priced: true, model: 'claude-opus-5-5' };
    expect(stepCacheOf(runtime.store).get('long')).toMatchObject({ from: 200, condensed: [{ cost: priced }, { cost: priced }] });
    expect(await advance(deps, 'long')).toMatchObject({ kind: 'advanced', state: { status: 'running', step: 307 } });
    // The 305 steps' $0.0244 and two of the script's at $0.40.
    const shown = (await showRun(runtime, 'long')).cost;
    expect(shown).toEqual({ usd: 0.8244, priced: true });
    const resumed = (await loadAsResumed(runtime.store, 'long', (s) => !unheldBlocksPriced(s)))!;
    expect(runCost(resumed.state, 'claude-opus-5-5')).toMatchObject({ usd: shown.usd, priced: true, unpriced: [] });
  });
});
