import { describe, expect, it } from 'vitest';
import { budgetReached, cancelState, defaultRaisedCap, forkState, retryState, stateAtStep } from '../../lib/core/operate.ts';
import type { RunState } from '../../lib/core/state.ts';
import { cap, recordFailure } from '../../lib/core/transitions.ts';
import { estimateRunUsd } from '../../lib/llm/cost.ts';
import { recordFor, stateAfter } from '../support/states.ts';

const usage = (inputTokens: number) => ({ inputTokens, outputTokens: 10, cacheWriteTokens: 5, cacheReadTokens: 1 });

/** A run of `n` steps whose records carry usage, plus usage no step carries (a discarded reply). */
function runWithUsage(n: number): RunState {
  const state = stateAfter('run', 0);
  for (let k = 1; k <= n; k++) {
    const record = { ...recordFor('run', k), usage: usage(100 * k), model: 'claude-opus-5-5' };
    state.steps.push(record);
  }
  return { ...state, step: n, usage: { inputTokens: 100 * (n * (n + 1)) / 2 + 7, outputTokens: 10 * n, cacheWriteTokens: 5 * n, cacheReadTokens: n } };
}

describe('operating transitions', () => {
  it('the state after step n: its first n steps, their usage summed, running, nothing pending or waiting', () => {
    const state = { ...runWithUsage(3), status: 'completed' as const, summary: 'done', pending: { step: 4, tool: 'x', input: {}, at: 1 } };
    const at = stateAtStep(state, 2);
    expect(at).toMatchObject({ status: 'running', step: 2, failures: 0, usage: { inputTokens: 300, outputTokens: 20, cacheWriteTokens: 10, cacheReadTokens: 2 } });
    expect(at.steps).toEqual(state.steps.slice(0, 2));
    expect(at.summary).toBeUndefined();
    expect(at.pending).toBeUndefined();
    expect(() => stateAtStep(state, 4)).toThrow(/there is no step 4/);
  });

  it('a fork keeps the parent\'s goal, cap and budget unless given, and says where it came from', () => {
    const parent = { ...runWithUsage(3), budget: { tokens: 10_000 } };
    const fork = forkState(parent, 1, { runId: 'f', version: 9, now: 50 });
    expect(fork).toMatchObject({ runId: 'f', goal: parent.goal, stepCap: 60, budget: { tokens: 10_000 }, forkedFrom: { runId: 'run', step: 1, version: 9 }, createdAt: 50 });
    expect(forkState(parent, 1, { runId: 'g', version: 9, now: 50, goal: 'other', stepCap: 5, budget: { usd: 1 } })).toMatchObject({ goal: 'other', stepCap: 5 });
    // A part given replaces that part, as on a retry: a dollar budget alone does not drop the token budget.
    expect(forkState(parent, 1, { runId: 'g', version: 9, now: 50, budget: { usd: 1 } }).budget).toEqual({ tokens: 10_000, usd: 1 });
    expect(forkState(parent, 1, { runId: 'g', version: 9, now: 50, budget: { tokens: 20_000 } }).budget).toEqual({ tokens: 20_000 });
    expect(forkState({ ...parent, budget: undefined }, 1, { runId: 'g', version: 9, now: 50 }).budget).toBeUndefined();
  });

  it('retry: failed keeps its cap (even at the cap, where the model may still say DONE); capped gets more; other statuses are refused', () => {
    const failed = recordFailure({ ...stateAfter('run', 4), stepCap: 4 }, new Error('boom'), 1, {});
    const stopped = recordFailure(recordFailure(failed, new Error('boom'), 2), new Error('boom'), 3);
    expect(stopped.status).toBe('failed');
    expect(retryState(stopped, { now: 9 })).toMatchObject({ status: 'running', failures: 0, stepCap: 4 });
    const capped = cap({ ...stateAfter('run', 4), stepCap: 4 }, 5);
    expect(defaultRaisedCap(capped)).toBe(14);
    expect(defaultRaisedCap({ ...capped, stepCap: 60 })).toBe(90);
    expect(retryState(capped, { now: 9 }).stepCap).toBe(14);
    expect(() => retryState(capped, { now: 9, stepCap: 4 })).toThrow(/no step to take/);
    expect(() => retryState(stateAfter('run', 1), { now: 9 })).toThrow(/is running/);
    expect(() => retryState(cancelState(stateAfter('run', 1), 'by ops', 9), { now: 9 })).toThrow(/is cancelled/);
  });

  it('a token budget counts every kind of token; a dollar budget that cannot be priced is reached', () => {
    const u = { inputTokens: 100, outputTokens: 50, cacheWriteTokens: 25, cacheReadTokens: 25 };
    expect(budgetReached({ tokens: 201 }, u, 0)).toBeUndefined();
    expect(budgetReached({ tokens: 200 }, u, 0)).toBe('token budget of 200 reached: 200 tokens used');
    expect(budgetReached({ usd: 1 }, u, 0.99)).toBeUndefined();
    expect(budgetReached({ usd: 1 }, u, 1)).toBe('dollar budget of $1 reached: an estimated $1.0000 spent');
    expect(budgetReached({ usd: 1 }, u, undefined)).toBe('dollar budget of $1 cannot be checked: some of the usage is of a model with no known price');
    expect(budgetReached({ usd: 1 }, u, undefined, 'claude-opus-9')).toBe('dollar budget of $1 cannot be checked: some of the usage is of model claude-opus-9, which has no known price');
    expect(budgetReached({ usd: 1 }, u, undefined, '')).toBe('dollar budget of $1 cannot be checked: some of the usage is of no named model, so it has no known price');
    expect(budgetReached({ tokens: 1000 }, u, undefined)).toBeUndefined();
  });

  it('the run cost for a budget prices each step by its model and the rest by the fallback, or is unknown', () => {
    const state = runWithUsage(2);
    const priced = estimateRunUsd(state, 'claude-opus-5-5')!;
    expect(priced).toBeGreaterThan(0);
    // 7 input tokens no step carries, at $4 per million.
    expect(priced - estimateRunUsd({ ...state, usage: { ...state.usage, inputTokens: state.usage.inputTokens - 7 } }, undefined)!).toBeCloseTo(7 * 4 / 1e6, 12);
    expect(estimateRunUsd(state, undefined)).toBeUndefined();
    expect(estimateRunUsd(state, 'no-such-model')).toBeUndefined();
    expect(estimateRunUsd({ ...state, steps: state.steps.map((s) => ({ ...s, model: 'no-such-model' })) }, 'claude-opus-5-5')).toBeUndefined();
  });
});
