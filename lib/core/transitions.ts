import { ModelUnavailableError, errorMessage, isPermanent } from './errors.ts';
import { withFields } from './objects.ts';
import { excerpt } from './prompt.ts';
import { redactSecrets } from './redact.ts';
import {
  DEFAULT_STEP_CAP, FORMAT_VERSION, MAX_ERROR_CHARS, MAX_MODEL_UNAVAILABLE_FAILURES, MAX_STEP_FAILURES, ZERO_USAGE, addUsage,
  type Budget, type Decision, type RunState, type StepRecord, type StepResult, type Usage,
} from './state.ts';

/** Pure state transitions: given a state and what happened, the next state. No I/O. */

export function initialState(input: {
  runId: string; agent: string; goal: string; stepCap?: number; budget?: Budget; now: number;
}): RunState {
  return {
    formatVersion: FORMAT_VERSION,
    runId: input.runId,
    agent: input.agent,
    goal: input.goal,
    status: 'running',
    step: 0,
    stepCap: input.stepCap ?? DEFAULT_STEP_CAP,
    failures: 0,
    usage: { ...ZERO_USAGE },
    ...(input.budget ? { budget: input.budget } : {}),
    createdAt: input.now,
    updatedAt: input.now,
    steps: [],
  };
}

/**
 * The record of a step done as decided: the decision's fields but its version, then the result and the
 * worker. Set in key order, so the record's canonical JSON, written at every step, copies nothing.
 */
export function stepRecordOf(decision: Decision, result: StepResult, workerId: string): StepRecord {
  const record = { at: decision.at } as StepRecord;
  if (decision.idempotencyKey !== undefined) record.idempotencyKey = decision.idempotencyKey;
  record.input = decision.input;
  if (decision.model !== undefined) record.model = decision.model;
  record.result = result;
  record.step = decision.step;
  record.tool = decision.tool;
  if (decision.usage !== undefined) record.usage = decision.usage;
  record.workerId = workerId;
  return record;
}

/** Every field of a decision, by what stepRecordOf does with it: a field added to Decision fails to compile here until it is. */
export const DECISION_FIELDS_IN_RECORD: Record<keyof Decision, 'kept' | 'dropped'> = {
  at: 'kept', idempotencyKey: 'kept', input: 'kept', model: 'kept', step: 'kept', tool: 'kept', usage: 'kept', atVersion: 'dropped',
};

/** `countUsage: false` when a failed attempt of this step already counted the usage of its decision. */
export function completeStep(state: RunState, record: StepRecord, now: number, options: { countUsage?: boolean } = {}): RunState {
  // Most steps follow a step that went well: nothing to leave out, so the state is copied once, not twice.
  const rest = 'pending' in state || 'lastError' in state || 'retryNote' in state ? withoutAttemptFields(state) : state;
  return withFields(rest, {
    step: record.step,
    failures: 0,
    steps: [...state.steps, record],
    usage: options.countUsage === false ? state.usage : addUsage(state.usage, record.usage),
    updatedAt: now,
  });
}

/** The state without what belonged to the attempts of the step now done: its decision, its last error, the retry note. */
function withoutAttemptFields(state: RunState): Omit<RunState, 'pending' | 'lastError' | 'retryNote'> {
  const { pending: _pending, lastError: _e, retryNote: _n, ...rest } = state;
  return rest;
}

export function complete(state: RunState, summary: string, usage: Usage | undefined, now: number): RunState {
  const { pending: _pending, retryNote: _n, ...rest } = state;
  return { ...rest, status: 'completed', summary, usage: addUsage(state.usage, usage), updatedAt: now };
}

export function capReached(state: RunState): boolean {
  return state.step >= state.stepCap;
}

/** `usage`: the model call at the cap whose reply asked for one more step. */
export function cap(state: RunState, now: number, usage?: Usage): RunState {
  const { retryNote: _n, ...rest } = state;
  return {
    ...rest, status: 'capped', reason: `step cap of ${state.stepCap} reached before the goal was done`,
    usage: addUsage(state.usage, usage), updatedAt: now,
  };
}

/**
 * A failed attempt at step + 1. Permanent errors fail the run at once; others fail it on the third try,
 * or the thirtieth while the model is unavailable.
 * The recorded decision stays, so the retry runs the same tool call.
 */
export function recordFailure(
  state: RunState,
  error: unknown,
  now: number,
  extra: { retryNote?: string; usage?: Usage; message?: string } = {},
): RunState {
  const failures = state.failures + 1;
  const message = errorText(extra.message ?? errorMessage(error));
  const { retryNote: _old, ...rest } = state;
  const next: RunState = withFields(rest, {
    failures,
    lastError: message,
    usage: addUsage(state.usage, extra.usage),
    updatedAt: now,
  });
  if (extra.retryNote) next.retryNote = extra.retryNote;
  // A model outage is waited out for longer than a failing tool: the step itself is not at fault.
  const limit = error instanceof ModelUnavailableError ? MAX_MODEL_UNAVAILABLE_FAILURES : MAX_STEP_FAILURES;
  if (isPermanent(error) || failures >= limit) {
    next.status = 'failed';
    next.reason = isPermanent(error)
      ? `step ${state.step + 1}: ${message}`
      : `step ${state.step + 1} failed ${failures} times; last error: ${message}`;
  }
  return next;
}

/**
 * The text, its start only when it is longer than MAX_ERROR_CHARS, saying how long it was; URL credentials
 * and secret-named query values masked. A tool's error names the URL it failed on (`fetch failed for
 * https://user:pass@db.internal/...`): kept as it was, the password went into the checkpoint, the next
 * prompt, `status`, `show`, the progress lines, the API and the inspector, where only log lines masked it.
 */
function errorText(given: string): string {
  const message = redactSecrets(given);
  return message.length <= MAX_ERROR_CHARS ? message : `${excerpt(message, MAX_ERROR_CHARS)} (${message.length} characters in all)`;
}
