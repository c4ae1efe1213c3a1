import { errorMessage } from '../core/errors.ts';
import type { Logger } from '../log.ts';
import type { CheckpointStore, Clock, RunMessage } from '../ports.ts';

/** A queue that can send a run's message again past the deduplication of the original (SqsRunQueue). */
export interface RedriveQueue {
  redrive(message: RunMessage, token: string): Promise<void>;
}

export interface SweepOptions {
  /** A running run whose latest checkpoint is older than this has lost its message. */
  stallMs: number;
  /** Runs re-enqueued per sweep at most; the next sweep takes the rest. */
  limit?: number;
  /**
   * Only runs of these agents (an agent's name and former names). Several agents can share a table, each
   * with its own queue and worker: a sweeper must put back only its own agent's runs, on its own queue.
   */
  agents?: readonly string[];
}

export const DEFAULT_STALL_MS = 15 * 60 * 1000;

/**
 * The supervisor for lost work. A running run always has a message on its way, except when the message
 * went to the dead-letter queue or the enqueue after its checkpoint failed; such a run would wait forever.
 * Re-sending the message for its latest version is always safe: if the original still exists, one of the
 * two finds the run moved on and stops (a stale message is a no-op).
 */
export async function sweepStalledRuns(
  deps: { store: CheckpointStore; queue: RedriveQueue; clock: Clock; log: Logger },
  options: SweepOptions,
): Promise<RunMessage[]> {
  const now = deps.clock.now();
  const stalled = await deps.store.list({ status: 'running', updatedBefore: now - options.stallMs, limit: options.limit ?? 500 });
  // One token per stall window: sweeps that run more often than that do not add copies.
  const token = `sweep-${Math.floor(now / options.stallMs)}`;
  const requeued: RunMessage[] = [];
  for (const run of stalled) {
    if (options.agents && !options.agents.includes(run.agent)) continue;
    const message = { runId: run.runId, version: run.version };
    try {
      await deps.queue.redrive(message, token);
      requeued.push(message);
      deps.log.warn({ event: 'run-requeued', runId: run.runId, version: run.version, step: run.step, idleMs: now - run.updatedAt }, 'stalled run re-enqueued');
    } catch (error) {
      deps.log.error({ event: 'requeue-failed', runId: run.runId, version: run.version, error: errorMessage(error) }, 'could not re-enqueue a stalled run; the next sweep retries');
    }
  }
  return requeued;
}
