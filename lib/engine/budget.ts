import { budgetReached } from '../core/operate.ts';
import type { RunState } from '../core/state.ts';
import { estimateRunUsd, lastModelOf, runCost } from '../llm/cost.ts';

/**
 * The model that prices a run's usage no step carries (the DONE reply, unusable replies): the one that
 * answered most recently, else `fallback` (the agent's model setting, or the model the worker runs).
 */
export function pricingModelOf(state: RunState, fallback?: string): string | undefined {
  return lastModelOf(state) ?? fallback;
}

/** The run's estimated cost so far, undefined if some of its usage has no known price. */
export function estimatedUsd(state: RunState, fallback?: string): number | undefined {
  return estimateRunUsd(state, pricingModelOf(state, fallback));
}

/** The model of the first usage of the run with no known price ('' for usage of no model known), if any. */
export function unpricedModelOf(state: RunState, fallback?: string): string | undefined {
  return runCost(state, pricingModelOf(state, fallback) ?? '').unpriced[0];
}

/** Why this run may not call the model again, or undefined (always, for a run with no budget). */
export function overBudget(state: RunState, fallback?: string): string | undefined {
  const budget = state.budget;
  if (!budget) return undefined;
  return budgetReached(budget, state.usage, budget.usd === undefined ? 0 : estimatedUsd(state, fallback), unpricedModelOf(state, fallback));
}

/** A model id from a Model's name (`anthropic:claude-opus-5-5`), for pricing. */
export function modelIdOf(name: string): string {
  return name.startsWith('anthropic:') ? name.slice('anthropic:'.length) : name;
}
