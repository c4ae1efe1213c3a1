import { randomUUID } from 'node:crypto';
import { worksRunsOf } from '../agent.ts';
import { decodeState } from '../core/codec.ts';
import { InvalidInputError, RunIdTakenError } from '../core/errors.ts';
import { checkBudget, checkStepCap } from '../core/operate.ts';
import { MAX_GOAL_BYTES, type Budget, type RunState } from '../core/state.ts';
import { initialState } from '../core/transitions.ts';
import type { EngineDeps } from './deps.ts';
import { sendAfterWrite, sendWithWrite } from '../send-with-write.ts';

export const RUN_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export interface StartResult {
  runId: string;
  created: boolean;
  version: number;
  /**
   * A run of this id existed already and has another of these than the start gave: not applied (a repeated
   * start changes nothing), so a caller can say so rather than take the run for the one it asked for.
   */
  unapplied?: StartOption[];
}

/** What a start sets and only a new run takes: a fork sets another goal, a retry or fork other limits. */
export type StartOption = 'goal' | 'stepCap' | 'budget';

/** Of the goal, step cap and budget a start gave, those the existing run does not have. */
export function unappliedStartOptions(state: RunState, given: { goal?: unknown; stepCap?: number; budget?: Budget }): StartOption[] {
  const budget = state.budget ?? {};
  return [
    ...(typeof given.goal === 'string' && given.goal.trim() !== state.goal.trim() ? ['goal' as const] : []),
    ...(given.stepCap !== undefined && given.stepCap !== state.stepCap ? ['stepCap' as const] : []),
    ...((given.budget?.tokens !== undefined && given.budget.tokens !== budget.tokens) || (given.budget?.usd !== undefined && given.budget.usd !== budget.usd)
      ? ['budget' as const] : []),
  ];
}

export function validateGoal(goal: unknown): string {
  if (goal !== undefined && goal !== null && typeof goal !== 'string') throw new InvalidInputError(`the goal is text that says what the run should achieve, not a ${typeof goal}`);
  if (typeof goal !== 'string' || goal.trim() === '') throw new InvalidInputError('the goal is empty: say what the run should achieve');
  const bytes = Buffer.byteLength(goal);
  if (bytes > MAX_GOAL_BYTES) throw new InvalidInputError(`the goal is ${bytes} bytes; the limit is ${MAX_GOAL_BYTES}. Put large inputs in a tool's data and refer to them`);
  return goal;
}

export function validateRunId(runId: string): string {
  // A program's untyped value (a number) matched the pattern as its text, and made a run the store keeps
  // as "5.0" whose message no worker can read: a run stuck running, found by neither id.
  if (typeof runId !== 'string') throw new InvalidInputError(`run id must be text matching ${RUN_ID_PATTERN}, not a ${typeof runId}`);
  if (!RUN_ID_PATTERN.test(runId)) throw new InvalidInputError(`run id ${JSON.stringify(runId)} must match ${RUN_ID_PATTERN}`);
  return runId;
}

/**
 * Creates a run (version 1) and enqueues its first step (in the create's transaction on the local file). Starting an existing run id changes nothing in
 * the run; if it is running, it re-drives the message for its latest version: a no-op while that message
 * is live, and a way past the deduplication record if the message was consumed without a successor.
 */
export async function startRun(
  deps: Pick<EngineDeps, 'store' | 'queue' | 'agent' | 'clock' | 'workerId' | 'codeVersion' | 'log'>,
  input: { goal: unknown; runId?: string; stepCap?: number; budget?: Budget },
): Promise<StartResult> {
  const goal = validateGoal(input.goal);
  const runId = validateRunId(input.runId ?? randomUUID());
  const stepCap = input.stepCap ?? deps.agent.settings?.stepCap;
  if (stepCap !== undefined) checkStepCap(stepCap);
  const budget = input.budget ?? deps.agent.settings?.budget;
  const state = initialState({
    runId, agent: deps.agent.name, goal, now: deps.clock.now(), ...(stepCap ? { stepCap } : {}), ...(budget ? { budget: checkBudget(budget) } : {}),
  });
  const first = { runId, version: 1 };
  const created = await deps.store.create(state, { workerId: deps.workerId, codeVersion: deps.codeVersion, ...sendWithWrite(deps.store, first) });
  if (created.created) {
    deps.log.info({ event: 'checkpoint', runId, step: 0, version: 1, workerId: deps.workerId, bytes: created.bytes, status: 'running' }, 'run created');
  }
  const latest = created.created ? undefined : await deps.store.load(runId);
  let unapplied: StartOption[] = [];
  if (latest) {
    let existing: RunState | undefined;
    try { existing = decodeState(latest); } catch { existing = undefined; } // unreadable: status and history say why
    if (existing && !worksRunsOf(deps.agent, existing.agent)) {
      throw new RunIdTakenError(runId, existing.agent, deps.agent.name);
    }
    if (existing) unapplied = unappliedStartOptions(existing, { goal, ...(input.stepCap !== undefined ? { stepCap: input.stepCap } : {}), ...(input.budget ? { budget: input.budget } : {}) });
  }
  if (created.created) await sendAfterWrite(deps.store, deps.queue, first);
  else if (latest?.status === 'running') await deps.queue.redrive({ runId, version: latest.version });
  return { runId, created: created.created, version: latest?.version ?? created.version, ...(unapplied.length ? { unapplied } : {}) };
}
