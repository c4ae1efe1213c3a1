import { InvalidInputError, NoSuchStepError, RunStateError } from './errors.ts';
import { unheldBlocks } from './unheld-blocks.ts';
import { waitedFor } from './waited-for.ts';
import {
  ZERO_USAGE, addUsage, budgetSchema,
  type Budget, type ForkedFrom, type RunState, type RunStatus, type Usage,
} from './state.ts';

/**
 * Pure transitions for operating runs by hand: the state after step n (show, fork), a fork, a retry, a
 * cancel, a stop on budget. No I/O; lib/engine/operate writes them, fenced like every checkpoint.
 */

/**
 * How to give a run a higher budget, in the words of every caller: these refusals reach the CLI, and the
 * API's and the inspector's callers too, who have no flags (the API's body takes `budget`, the inspector's
 * Fork and Retry forms a token and a dollar budget).
 */
export const RAISE_BUDGET = '--budget-tokens or --budget-usd (in the API, "budget": {"tokens", "usd"}; in the inspector, the token or dollar budget)';

/** The statuses `retry` continues from. An unreadable run is `failed` too, but its head cannot be read. */
export const RETRYABLE_STATUSES: readonly RunStatus[] = ['failed', 'capped', 'over-budget'];

/**
 * The usage the first `n` steps' records carry: the model calls that chose those steps. A state from a
 * bounded read (stepsFrom) counts the steps it does not hold from their blocks' summaries.
 */
export function usageOfSteps(state: RunState, n = (state.stepsFrom ?? 0) + state.steps.length): Usage {
  const from = state.stepsFrom ?? 0;
  const unheld = unheldBlocks(state).reduce((sum, b) => addUsage(sum, b.usage), { ...ZERO_USAGE });
  return state.steps.slice(0, n - from).reduce((sum, s) => addUsage(sum, s.usage), unheld);
}

/** Refuses a step `show` and `fork` cannot stand after: one past the run's last, or the one it waits at. */
export function checkCompletedStep(state: RunState, n: number): void {
  if (!Number.isInteger(n) || n < 0) throw new InvalidInputError(`the step must be a whole number from 0, got ${n}`);
  // The step a run waits at is the one `status` and `show` name, but it has no result until it is
  // answered: said so, rather than that the step does not exist.
  if (state.wait && n === state.wait.step) {
    throw new NoSuchStepError(state.runId, n, `step ${n} of run ${state.runId} has no result yet: the run waits there for ${waitedFor(state.wait)}; its last completed step is ${state.step}, and a fork from step ${state.step} asks the model again there`);
  }
  if (n > state.step) throw new NoSuchStepError(state.runId, n, `run ${state.runId} has ${state.step} completed step${state.step === 1 ? '' : 's'}; there is no step ${n}`);
}

/**
 * The run as it stood after step `n`: its first n steps, their usage summed, running, nothing pending.
 * Goal, agent, cap and budget are the run's now (only a retry changes cap or budget). The usage is what
 * the step records carry: model calls whose reply was discarded count only toward the run's own total.
 * A state that holds its records from step stepsFrom + 1 (not past `n`) gives the steps it holds up to n.
 */
export function stateAtStep(state: RunState, n: number): RunState {
  checkCompletedStep(state, n);
  const from = state.stepsFrom ?? 0;
  if (n < from) throw new Error(`stateAtStep: step ${n} is before the records held (from step ${from + 1})`);
  const { pending: _p, wait: _w, lastError: _e, retryNote: _n, reason: _r, summary: _s, ...rest } = state;
  return { ...rest, status: 'running', step: n, failures: 0, steps: state.steps.slice(0, n - from), usage: usageOfSteps(state, n) };
}

export interface ForkOptions {
  runId: string;
  /** The parent's version the fork was read at. */
  version: number;
  now: number;
  goal?: string;
  stepCap?: number;
  budget?: Budget;
}

/** A new run that starts from `parent` after step n: its copies of the first n steps, then its own. */
export function forkState(parent: RunState, n: number, options: ForkOptions): RunState {
  const at = stateAtStep(parent, n);
  const forkedFrom: ForkedFrom = { runId: parent.runId, step: n, version: options.version };
  const { budget: _b, forkedFrom: _f, ...rest } = at;
  // The parts given replace the parent's, as on a retry: `--budget-usd` alone keeps the token budget.
  const budget = options.budget || parent.budget ? { ...parent.budget, ...options.budget } : undefined;
  const stepCap = options.stepCap ?? parent.stepCap;
  checkStepCap(stepCap);
  // As for a retry of a capped run: a fork must have room for a step of its own, or its first step only
  // pays for a model call to end capped again (a capped run forked at its last step, its cap inherited).
  if (stepCap <= n) {
    throw new InvalidInputError(`a step cap of ${stepCap} leaves a fork from step ${n} of run ${parent.runId} no step to take: give it a step cap above ${n}`);
  }
  return {
    ...rest, runId: options.runId, goal: options.goal ?? parent.goal, stepCap, forkedFrom,
    ...(budget ? { budget: checkBudget(budget) } : {}),
    createdAt: options.now, updatedAt: options.now,
  };
}

export interface RetryOptions {
  now: number;
  /** The new step cap; a capped run without one gets DEFAULT_CAP_RAISE more. */
  stepCap?: number;
  /** Replaces the given parts of the budget. */
  budget?: Budget;
}

/** How much a capped run's cap grows on retry unless given: half the cap again, at least 10 steps. */
export function defaultRaisedCap(state: RunState): number {
  return state.stepCap + Math.max(10, Math.ceil(state.stepCap / 2));
}

/**
 * A failed, capped or over-budget run, running again from its last checkpoint: no failures, no error, no
 * reason; the recorded decision (if any) stays, so the next step runs that call with its key. A capped
 * run gets a higher cap; an over-budget run must be given a budget it has not reached.
 */
export function retryState(state: RunState, options: RetryOptions, usd?: number, unpricedModel?: string): RunState {
  if (!RETRYABLE_STATUSES.includes(state.status)) {
    // A run that ended as it should (completed) or by a person's word (cancelled) is not continued in
    // place; a fork takes its state on under a new id.
    const fork = state.status === 'completed' || state.status === 'cancelled' ? `; fork it from step ${state.step} to go on from its state` : '';
    // Two retries at once: the one that lost read its refusal as its own options refused, not as the run
    // going on under the other's (its --step-cap never said dropped). The cap it goes on with, and that
    // nothing of this one's was applied.
    const live = state.status === 'running' || state.status === 'waiting' ? ` (at step ${state.step} of at most ${state.stepCap}: nothing of this retry was applied; another may have just continued it)` : '';
    throw new RunStateError(state.runId, state.status, `run ${state.runId} is ${state.status}${live}; only a ${RETRYABLE_STATUSES.join(', ')} run can be retried${fork}`);
  }
  const stepCap = options.stepCap ?? (state.status === 'capped' ? defaultRaisedCap(state) : state.stepCap);
  checkStepCap(stepCap);
  // At its cap a run asks the model once more for DONE only; a capped run needs room for more steps.
  if (stepCap < state.step || (state.status === 'capped' && stepCap <= state.step)) {
    throw new InvalidInputError(`a step cap of ${stepCap} leaves run ${state.runId} no step to take: it has done ${state.step}`);
  }
  const budget = options.budget || state.budget ? checkBudget({ ...state.budget, ...options.budget }) : undefined;
  if (budget) {
    const over = budgetReached(budget, state.usage, usd, unpricedModel);
    if (over) throw new InvalidInputError(`run ${state.runId} would stop again at once: ${over}; raise it with ${RAISE_BUDGET}`);
  }
  const { lastError: _e, reason: _r, budget: _b, ...rest } = state;
  return { ...rest, status: 'running', failures: 0, stepCap, ...(budget ? { budget } : {}), updatedAt: options.now };
}

/** What a cancel request records: who asked, when, and why. */
export function cancelRequest(by: string, at: number, why?: string): string {
  return `by ${by} at ${new Date(at).toISOString()}${why ? `: ${why}` : ''}`;
}

/**
 * The run stopped by a cancel: it never advances again. A wait it had is dropped with it, and its reason
 * says what the run waited for: dropped without a word, `show` and `history` of a run cancelled in a wait
 * no longer said what it had been waiting for.
 */
export function cancelState(state: RunState, request: string, now: number, usage?: Usage): RunState {
  const { wait, retryNote: _n, ...rest } = state;
  const waited = state.status === 'waiting' && wait ? ` (it waited for ${waitedFor(wait)} at step ${wait.step})` : '';
  return { ...rest, status: 'cancelled', reason: `cancelled ${request}${waited}`, usage: addUsage(state.usage, usage), updatedAt: now };
}

/** The run stopped before a model call that its budget does not allow. */
export function overBudgetState(state: RunState, reason: string, now: number): RunState {
  const { retryNote: _n, ...rest } = state;
  return { ...rest, status: 'over-budget', reason, updatedAt: now };
}

/** Every token of a usage, however it was billed: what a token budget counts. */
export function totalTokens(usage: Usage): number {
  return usage.inputTokens + usage.outputTokens + usage.cacheWriteTokens + usage.cacheReadTokens;
}

/**
 * Why a run with this usage may not call the model again, or undefined. `usd` is the estimated cost so
 * far, undefined when some of the usage has no known price: a dollar budget that cannot be checked stops
 * the run rather than letting it spend without limit. `unpricedModel` is that usage's model ('' for none).
 */
export function budgetReached(budget: Budget, usage: Usage, usd: number | undefined, unpricedModel?: string): string | undefined {
  const tokens = totalTokens(usage);
  if (budget.tokens !== undefined && tokens >= budget.tokens) {
    return `token budget of ${budget.tokens} reached: ${tokens} tokens used`;
  }
  if (budget.usd !== undefined) {
    // Named, so the fix is plain: a model id the price table does not know (a typo, a newer model), or none.
    if (usd === undefined) {
      const which = unpricedModel ? `of model ${unpricedModel}, which has` : unpricedModel === '' ? 'of no named model, so it has' : 'of a model with';
      return `dollar budget of $${budget.usd} cannot be checked: some of the usage is ${which} no known price`;
    }
    if (usd >= budget.usd) return `dollar budget of $${budget.usd} reached: an estimated $${usd.toFixed(4)} spent`;
  }
  return undefined;
}

export function checkBudget(budget: Budget): Budget {
  // Strict, as the API's and the agent's settings are: a misspelt part a program passes (`{ dollars: 5 }`)
  // was dropped, and the run started with no limit at all.
  const parsed = budgetSchema.strict().safeParse(budget);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue?.path.join('.');
    throw new InvalidInputError(`budget${path ? ` ${path}` : ''}: ${issue?.message ?? 'invalid'} (tokens: a whole number above 0; usd: a number above 0)`);
  }
  return parsed.data;
}

/**
 * A whole number JavaScript holds exactly, as the run head's schema reads it back: a cap such as 1e308
 * ("no limit") is an integer to Number.isInteger, was written, and made the run's first load fail it as
 * unreadable, a state no retry or fork can leave.
 */
export function checkStepCap(stepCap: number): void {
  if (!Number.isSafeInteger(stepCap) || stepCap < 1) throw new InvalidInputError(`step cap must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER}, got ${stepCap}`);
}
