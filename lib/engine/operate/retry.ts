import { StaleVersionError } from '../../core/errors.ts';
import { retryState } from '../../core/operate.ts';
import type { Budget, RunStatus } from '../../core/state.ts';
import { estimatedUsd, unpricedModelOf } from '../budget.ts';
import type { OperateDeps } from './deps.ts';
import { loadRun } from './load.ts';
import { sendAfterWrite, sendWithWrite } from '../../send-with-write.ts';

export interface RetryInput {
  /** The new step cap. A capped run without one gets half its cap again, at least 10 steps. */
  stepCap?: number;
  /** Replaces these parts of the run's budget; an over-budget run needs one it has not reached. */
  budget?: Budget;
  /** Prices usage no step records a model for (the CLI's STEPWISE_MODEL or the default model). */
  pricingModel?: string;
}

export interface RetryResult {
  runId: string;
  version: number;
  from: RunStatus;
  stepCap: number;
  budget?: Budget;
}

/**
 * Continues a failed, capped or over-budget run from its last checkpoint: a checkpoint fenced on the
 * version it read (two retries at once: one wins, the other finds the run running), then the message for
 * the new version. The new version was never sent, so a plain send is enough: in the checkpoint's own
 * transaction on the local file; elsewhere after it, and if this process dies between the two, the run is
 * running with no message, which the sweep re-drives, or the same retry asked again sends.
 */
export async function retryRun(deps: OperateDeps, runId: string, input: RetryInput): Promise<RetryResult> {
  for (let attempt = 1; ; attempt++) {
    const { stored, state } = await loadRun(deps.store, runId, 'retry');
    let next;
    try {
      next = retryState(state, {
        now: deps.clock.now(),
        ...(input.stepCap !== undefined ? { stepCap: input.stepCap } : {}),
        ...(input.budget ? { budget: input.budget } : {}),
      }, estimatedUsd(state, input.pricingModel), unpricedModelOf(state, input.pricingModel));
    } catch (error) {
      // A retry asked again finds the run running: the first may have written and died before its send
      // (SQS refused it, the process was killed), where only the sweep, a stall later, moved the run. Its
      // latest message is sent again, deduplicated, as a repeated start and a repeated fork send theirs.
      if (state.status === 'running') await deps.queue.redrive({ runId, version: stored.version });
      throw error;
    }
    let version: number;
    const message = { runId, version: stored.version + 1 };
    try {
      const written = await deps.store.commit({
        runId, expectedVersion: stored.version, state: next, workerId: deps.workerId, codeVersion: deps.codeVersion, ...sendWithWrite(deps.store, message),
      });
      version = written.version;
      deps.log.info({
        event: 'checkpoint', runId, step: next.step, version, workerId: deps.workerId, bytes: written.bytes, status: 'running',
        retriedFrom: state.status, stepCap: next.stepCap, ...(next.budget ? { budget: next.budget } : {}),
      }, 'run retried');
    } catch (error) {
      // Something else moved it first: the next look says what it is now.
      if (error instanceof StaleVersionError && attempt < 3) continue;
      throw error;
    }
    await sendAfterWrite(deps.store, deps.queue, message);
    return { runId, version, from: state.status, stepCap: next.stepCap, ...(next.budget ? { budget: next.budget } : {}) };
  }
}
