import { createHash } from 'node:crypto';
import { decodeState } from '../../core/codec.ts';
import { InvalidInputError, RunStateError, StaleVersionError, UnknownRunError } from '../../core/errors.ts';
import { cancelRequest } from '../../core/operate.ts';
import { isTerminal } from '../../core/state.ts';
import type { OperateDeps } from './deps.ts';
import { commitCancel } from '../../commit-cancel.ts';

export { commitCancel };

export interface CancelInput {
  /** Who cancels: kept in the request and the run's reason. */
  by: string;
  reason?: string;
}

export type CancelOutcome =
  /**
   * The run was waiting, so nothing was running: it is cancelled now. `earlier`: a cancel asked for while
   * the step that began the wait ran, not yet applied, is the one applied, with its `request`; this one's
   * who and why are not kept, as with a running run's earlier request.
   */
  | { outcome: 'cancelled'; runId: string; version: number; request?: string; earlier?: true }
  /**
   * The run is running: it stops at its next step boundary (a step running now still finishes).
   * `earlier`: a cancel was already asked for, and `request` is that one's; this one only redrove the run.
   */
  | { outcome: 'requested'; runId: string; version: number; request: string; earlier?: true }
  | { outcome: 'already-cancelled'; runId: string; version: number };

const ATTEMPTS = 5;

/**
 * Stops a run for good. A waiting run has nothing running, so it is cancelled at once, by a checkpoint
 * fenced on its waiting version (an answer racing it either wins first, and the run is then cancelled at
 * its next boundary, or loses). A running run may have a step in flight on some worker, and that step
 * must finish and be recorded: the version must not move under it, so the request is written beside the
 * version (CheckpointStore.requestCancel), and the next delivery, or the wait that step saves, applies it
 * before anything else happens.
 */
export async function cancelRun(deps: OperateDeps, runId: string, input: CancelInput): Promise<CancelOutcome> {
  // A program's untyped input (no by, a number) is told what is missing, not a TypeError from trim().
  const by = typeof input?.by === 'string' ? input.by.trim() : '';
  if (!by || by.length > 254) throw new InvalidInputError('say who cancels (--as, or "by" in the API and cancelRun): 1 to 254 characters');
  if (input.reason !== undefined && typeof input.reason !== 'string') throw new InvalidInputError(`the reason is text, not a ${typeof input.reason}`);
  if (input.reason !== undefined && input.reason.length > 1000) throw new InvalidInputError('the reason is limited to 1,000 characters');
  for (let attempt = 1; ; attempt++) {
    const stored = await deps.store.load(runId);
    if (!stored) throw new UnknownRunError(runId);
    if (stored.status === 'cancelled') return { outcome: 'already-cancelled', runId, version: stored.version };
    if (isTerminal(stored.status)) throw new RunStateError(runId, stored.status, `run ${runId} has already ended (${stored.status}): nothing to cancel`);
    try {
      if (stored.status === 'running') {
        if (stored.cancelRequested !== undefined) {
          // The first cancel's redrive may never have been sent (its process killed after writing the request):
          // redriving again is what moves a run whose message was lost, where otherwise only the sweep would.
          await deps.queue.redrive({ runId, version: stored.version }, { token: redriveToken(stored.cancelRequested) });
          return { outcome: 'requested', runId, version: stored.version, request: stored.cancelRequested, earlier: true };
        }
        const request = cancelRequest(by, deps.clock.now(), input.reason);
        await deps.store.requestCancel(runId, stored.version, request);
        deps.log.info({ event: 'cancel-requested', runId, version: stored.version, request }, 'cancel requested: the run stops at its next step boundary');
        // A delivery soon applies it, even if the run's message was lost: a no-op while that message is live,
        // but on the local file a message waiting out a failed try's backoff is made due now (SqliteQueue.redrive).
        await deps.queue.redrive({ runId, version: stored.version }, { token: redriveToken(request) });
        return { outcome: 'requested', runId, version: stored.version, request };
      }
      if (stored.cancelRequested !== undefined) {
        const version = await commitCancel(deps, stored.version, decodeState(stored), stored.cancelRequested);
        return { outcome: 'cancelled', runId, version, request: stored.cancelRequested, earlier: true };
      }
      const version = await commitCancel(deps, stored.version, decodeState(stored), cancelRequest(by, deps.clock.now(), input.reason));
      return { outcome: 'cancelled', runId, version };
    } catch (error) {
      // The run moved (a step committed, an answer came): look again.
      if (error instanceof StaleVersionError && attempt < ATTEMPTS) continue;
      throw error;
    }
  }
}

/**
 * SQS's token for a cancel's redrive, the same for every cancel of one request. Without one the redrive was
 * deduplicated for 5 minutes against the version's own send, the very message that may be lost; with it a
 * request adds at most one copy in that window (a copy behind a live message finds the run moved on).
 * Hashed: a request has spaces, which a deduplication id may not.
 */
function redriveToken(request: string): string {
  return `cancel-${createHash('sha256').update(request).digest('hex').slice(0, 16)}`;
}
