import { createHash } from 'node:crypto';
import { decodeState, type StoredCheckpoint } from '../../core/codec.ts';
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
   * The run was running, but no worker held its message (none running, or all stopped): the cancel took
   * the message and applied the request at once (RunQueue.takeIdle, the local queue). `earlier` as above.
   */
  | { outcome: 'cancelled'; runId: string; version: number; request: string; idle: true; earlier?: true }
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
          const version = await applyIfIdle(deps, stored, stored.cancelRequested);
          if (version !== undefined) return { outcome: 'cancelled', runId, version, request: stored.cancelRequested, idle: true, earlier: true };
          return { outcome: 'requested', runId, version: stored.version, request: stored.cancelRequested, earlier: true };
        }
        const request = cancelRequest(by, deps.clock.now(), input.reason);
        // Written while the run is still running, at the version read or a later one (a step committed since).
        const version = await deps.store.requestCancel(runId, stored.version, request);
        deps.log.info({ event: 'cancel-requested', runId, version, request }, 'cancel requested: the run stops at its next step boundary');
        // A delivery soon applies it, even if the run's message was lost: a no-op while that message is live,
        // but on the local file a message waiting out a failed try's backoff is made due now (SqliteQueue.redrive).
        await deps.queue.redrive({ runId, version }, { token: redriveToken(request) });
        // Written beside a later version, the run took a step since it was read: a worker is working it.
        const cancelled = version === stored.version ? await applyIfIdle(deps, stored, request) : undefined;
        if (cancelled !== undefined) return { outcome: 'cancelled', runId, version: cancelled, request, idle: true };
        return { outcome: 'requested', runId, version, request };
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

/** How long the cancel holds a message it took: past it, a worker takes the message and applies the request. */
const TAKE_MS = 30_000;

/**
 * The requested cancel of a running run, applied now when no worker holds its message: a run nothing
 * works on (`run` stopped with Ctrl-C, no worker started, its workers retired) stayed "running, cancel
 * requested" until a worker came. The message is taken as a worker would take it, so none starts a step
 * meanwhile; the cancel is fenced on the version the request was written at, as a worker's would be. The
 * version of the cancelled checkpoint, or undefined: a worker holds the message (it applies the request),
 * the run has none visible, or the run moved (the taken message is handed back).
 */
async function applyIfIdle(deps: OperateDeps, stored: StoredCheckpoint, request: string): Promise<number | undefined> {
  const taken = await deps.queue.takeIdle?.(stored.runId, TAKE_MS);
  if (!taken) return undefined;
  let version: number;
  try {
    version = await commitCancel(deps, stored.version, decodeState(stored), request);
  } catch (error) {
    await taken.handBack();
    if (error instanceof StaleVersionError) return undefined;
    throw error;
  }
  await taken.ack();
  return version;
}
