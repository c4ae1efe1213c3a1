import { RunStateError, StaleVersionError, UnknownRunError } from '../../core/errors.ts';
import { isTerminal, type RunStatus } from '../../core/statuses.ts';
import type { OperateDeps } from './deps.ts';

export type DeleteOutcome = (
  /** The run was at `version`, ended `status`, and is gone with everything kept for it. */
  | { outcome: 'deleted'; runId: string; version: number; status: RunStatus }
  /** An earlier delete of the run was interrupted (after its fence on DynamoDB, or before its emails): this one removed the rest. */
  | { outcome: 'finished'; runId: string }
) & {
  /** Approval emails of the run the notifier kept (an outbox's files) and this delete removed; absent when it keeps none. */
  emails?: number;
};

const ATTEMPTS = 3;

/**
 * Deletes a run that has ended (CheckpointStore.deleteRun): a running or waiting one is refused, to be
 * cancelled first, since a worker or an answer may be about to write it; so is one with an effect still
 * running under its idempotency key (the store's EffectStillRunningError, which says when to try again). The delete is fenced on the
 * version and status read, so a retry that makes a failed run running again either wins (the next look
 * finds it running, and refuses) or loses (it finds no run).
 */
export async function deleteRun(deps: OperateDeps, runId: string): Promise<DeleteOutcome> {
  for (let attempt = 1; ; attempt++) {
    // The head alone: a run's status and version are all the delete is fenced on, however long it is.
    const stored = await deps.store.load(runId, { afterStep: Number.MAX_SAFE_INTEGER });
    if (!stored) {
      const finished = await deps.store.deleteRun(runId);
      // The emails go after the store's delete (a run is not deleted until that is done): one cut short
      // between the two left them to this one.
      const emails = await deleteEmails(deps, runId);
      if (finished || emails.emails) {
        deps.log.info({ event: 'run-deleted', runId, finished: true, ...emails }, 'an interrupted delete of the run finished');
        return { outcome: 'finished', runId, ...emails };
      }
      throw new UnknownRunError(runId);
    }
    if (!isTerminal(stored.status)) {
      throw new RunStateError(runId, stored.status, `run ${runId} is ${stored.status}: only a run that has ended can be deleted; cancel it first (stepwise cancel ${runId}), then delete it once it is cancelled`);
    }
    try {
      await deps.store.deleteRun(runId, stored.version);
    } catch (error) {
      // Something moved it first (a retry made it running, another delete took it): the next look says what.
      if (error instanceof StaleVersionError && attempt < ATTEMPTS) continue;
      throw error;
    }
    const emails = await deleteEmails(deps, runId);
    deps.log.info({ event: 'run-deleted', runId, version: stored.version, status: stored.status, ...emails }, 'run deleted');
    return { outcome: 'deleted', runId, version: stored.version, status: stored.status, ...emails };
  }
}

/** The run's emails the notifier keeps (Notifier.deleteRun), counted; nothing for one that keeps none. */
async function deleteEmails(deps: OperateDeps, runId: string): Promise<{ emails?: number }> {
  return deps.notifier?.deleteRun ? { emails: await deps.notifier.deleteRun(runId) } : {};
}
