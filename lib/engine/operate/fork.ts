import { randomBytes } from 'node:crypto';
import { decodeState } from '../../core/codec.ts';
import { InvalidInputError, RunIdInUseError } from '../../core/errors.ts';
import { RAISE_BUDGET, budgetReached, forkState } from '../../core/operate.ts';
import type { Budget, ForkedFrom, RunState } from '../../core/state.ts';
import { approvalsAmong } from '../../core/waits.ts';
import { estimatedUsd, unpricedModelOf } from '../budget.ts';
import { RUN_ID_PATTERN, unappliedStartOptions, validateGoal, validateRunId, type StartOption } from '../start.ts';
import type { OperateDeps } from './deps.ts';
import { loadRun } from './load.ts';
import { sendAfterWrite, sendWithWrite } from '../../send-with-write.ts';

export interface ForkInput {
  /** The fork starts from the state after this step of its parent (0: from the goal alone). */
  fromStep: number;
  /** Default `<parent>-fork-<step>-<6 random characters>`. */
  runId?: string;
  /** Default the parent's goal. */
  goal?: string;
  /** Default the parent's. */
  stepCap?: number;
  /** Replaces these parts of the parent's budget. */
  budget?: Budget;
  /** Prices usage no step records a model for (the CLI's STEPWISE_MODEL or the default model), as on a retry. */
  pricingModel?: string;
}

export interface ForkResult {
  runId: string;
  /** False when a run with this id existed already: the same fork, made before (nothing changed). */
  created: boolean;
  version: number;
  forkedFrom: ForkedFrom;
  /** That fork has another of these than this one gave: not applied, as with a repeated start. */
  unapplied?: StartOption[];
  /**
   * The approvals among the copied steps (a created fork's): its model reads each as given to it, goal
   * changed or not. A tool with `approval` never runs on one; a request_approval answer is what the model sees.
   */
  approvals?: { step: number; tool: string; by: string }[];
}

/**
 * A new run that starts from another after its step n. Its create writes copies of the parent's first n
 * step records as its own rows, so it replays nothing, and a worker's step cache (by store and run id)
 * cannot mix its steps with the parent's. Its next step is n + 1 under its own run id, so its idempotency
 * keys are its own: nothing of the parent is applied again or wrongly skipped. The parent is only read.
 * Step records never change once written, so this reads a consistent state of any parent, even running.
 */
export async function forkRun(deps: OperateDeps, parentId: string, input: ForkInput): Promise<ForkResult> {
  const { stored, state: parent } = await loadRun(deps.store, parentId, 'fork');
  const step = input.fromStep;
  const runId = validateRunId(input.runId ?? defaultForkId(parentId, step));
  const goal = input.goal === undefined ? undefined : validateGoal(input.goal);
  const state = forkState(parent, step, {
    runId, version: stored.version, now: deps.clock.now(),
    ...(goal !== undefined ? { goal } : {}),
    ...(input.stepCap !== undefined ? { stepCap: input.stepCap } : {}),
    ...(input.budget ? { budget: input.budget } : {}),
  });
  // As a retry is: a fork whose budget its copied steps have reached would stop at once as over-budget.
  const over = state.budget && budgetReached(state.budget, state.usage, estimatedUsd(state, input.pricingModel), unpricedModelOf(state, input.pricingModel));
  if (over) throw new InvalidInputError(`a fork of run ${parentId} from step ${step} would stop at once: ${over}; give it a budget above that with ${RAISE_BUDGET}`);
  const forkedFrom = state.forkedFrom!;
  const first = { runId, version: 1 };
  const created = await deps.store.create(state, { workerId: deps.workerId, codeVersion: deps.codeVersion, ...sendWithWrite(deps.store, first) });
  if (!created.created) {
    // Like a repeated start: the same fork again changes nothing, any other run of that id is refused.
    const existing = await deps.store.load(runId);
    let fork: RunState | undefined;
    try { fork = existing && decodeState(existing); } catch { fork = undefined; }
    const from = fork?.forkedFrom;
    if (!existing || !fork || from?.runId !== parentId || from.step !== step) {
      throw new RunIdInUseError(runId, `run ${runId} already exists and is not a fork of ${parentId} at step ${step}: choose another run id`);
    }
    if (existing.status === 'running') await deps.queue.redrive({ runId, version: existing.version });
    // The same fork asked again with another goal or limits: said, not dropped in silence.
    const unapplied = unappliedStartOptions(fork, {
      ...(goal !== undefined ? { goal } : {}), ...(input.stepCap !== undefined ? { stepCap: input.stepCap } : {}), ...(input.budget ? { budget: input.budget } : {}),
    });
    return { runId, created: false, version: existing.version, forkedFrom: from, ...(unapplied.length ? { unapplied } : {}) };
  }
  deps.log.info({
    event: 'checkpoint', runId, step, version: created.version, workerId: deps.workerId, bytes: created.bytes, status: 'running',
    forkedFrom,
  }, 'run forked');
  await sendAfterWrite(deps.store, deps.queue, first);
  const approvals = approvalsAmong(state.steps);
  return { runId, created: true, version: created.version, forkedFrom, ...(approvals.length ? { approvals } : {}) };
}

/** `<parent>-fork-<step>-<random>`, the parent's part cut so the id stays within RUN_ID_PATTERN. */
export function defaultForkId(parentId: string, step: number): string {
  const suffix = `-fork-${step}-${randomBytes(3).toString('hex')}`;
  const id = `${parentId.slice(0, 128 - suffix.length)}${suffix}`;
  return RUN_ID_PATTERN.test(id) ? id : `fork${suffix}`;
}
