import { decodeState } from '../core/codec.ts';
import { StaleVersionError, UnreadableCheckpointError, errorMessage } from '../core/errors.ts';
import { commitCancel } from '../commit-cancel.ts';
import type { RunState, WaitRecord } from '../core/state.ts';
import { deadlineAnswer } from '../core/waits.ts';
import type { IdempotencyLedger } from '../ports.ts';
import { answerWait, type AnswerDeps } from './answer.ts';
import { approvalEmail } from './approval-email.ts';
import { maskedLink, signApproval } from './approval-token.ts';
import { keysOf } from './signing-key.ts';
import { answeredEventIds, eventAnswer } from './events.ts';
import { DEFAULT_EARLY_EVENT_MS, type WaitServices } from './services.ts';

export interface DriveDeps extends AnswerDeps {
  ledger: IdempotencyLedger;
  waits?: WaitServices;
}

/**
 * Moves a waiting run along from a queue delivery: the one that just saved it as waiting, a redelivery of
 * that one, or its timer. Everything here is safe to repeat, because any of those may come more than once:
 * emails go through the idempotency ledger (once per wait and approver), an early event resolves the wait
 * through the version fence, and the timer message is deduplicated by the queue.
 */
export async function driveWait(deps: DriveDeps, runId: string): Promise<{ links: string[]; failed?: true }> {
  const none = { links: [] };
  const stored = await deps.store.load(runId);
  if (!stored || stored.status !== 'waiting') return none;
  let state: RunState;
  try {
    state = decodeState(stored);
  } catch (error) {
    if (!(error instanceof UnreadableCheckpointError)) throw error;
    return (await failUnreadable(deps, runId, stored.version, error.message)) ? { links: [], failed: true } : none;
  }
  // A cancel asked for while the step that began this wait was running: applied now the wait is saved.
  if (stored.cancelRequested !== undefined) {
    try {
      await commitCancel(deps, stored.version, state, stored.cancelRequested);
    } catch (error) {
      // An answer came first: the run is running again, and its next delivery applies the cancel.
      if (!(error instanceof StaleVersionError)) throw error;
    }
    return none;
  }
  const wait = state.wait;
  if (!wait) return none;
  const now = deps.clock.now();
  if (now >= wait.deadline) {
    const outcome = await answerWait(deps, { runId, waitId: wait.id, answer: deadlineAnswer(wait) });
    deps.log.info({ event: 'wait-deadline', runId, waitId: wait.id, kind: wait.kind, outcome: outcome.outcome }, 'wait reached its deadline');
    return none;
  }
  const links = wait.kind === 'approval' ? await notifyApprovers(deps, state, wait) : [];
  if (wait.kind === 'event' && (await matchEarlyEvent(deps, state, wait))) return none;
  const delayMs = wait.deadline - now;
  if (delayMs <= (deps.waits?.maxTimerMs ?? Number.POSITIVE_INFINITY)) {
    await deps.queue.send({ runId, version: stored.version }, { delayMs, timer: true });
  }
  return { links };
}

/**
 * A waiting run whose checkpoint this code cannot read fails, as a step fails it (advance): with the reason,
 * its unreadable head kept for an operator. Fenced: an answer that came first (a newer version) stands.
 */
async function failUnreadable(deps: DriveDeps, runId: string, version: number, reason: string): Promise<boolean> {
  try {
    const written = await deps.store.markUnreadable(runId, version, reason, { workerId: deps.workerId, codeVersion: deps.codeVersion });
    deps.log.error({ event: 'checkpoint', runId, step: written.step, version: written.version, workerId: deps.workerId, bytes: written.bytes, status: 'failed', reason }, 'waiting run failed: unreadable checkpoint');
    return true;
  } catch (error) {
    if (!(error instanceof StaleVersionError)) throw error;
    return false;
  }
}

/** Emails each approver once; returns their links. */
async function notifyApprovers(deps: DriveDeps, state: RunState, wait: WaitRecord): Promise<string[]> {
  const services = deps.waits;
  if (!services?.notifier || !services.signingKey || !services.publicUrl) {
    deps.log.warn({ event: 'approval-not-sent', runId: state.runId, waitId: wait.id, approvers: wait.approvers },
      'no notifier, signing key or public URL is configured: answer this approval with `stepwise approve` or the API');
    return [];
  }
  const links: string[] = [];
  const failed: unknown[] = [];
  const key = keysOf(await services.signingKey()).signing;
  for (const approver of wait.approvers ?? []) {
    const token = signApproval({ runId: state.runId, waitId: wait.id, approver, expiresAt: wait.deadline }, key);
    const link = `${services.publicUrl.replace(/\/+$/, '')}/approvals/${token}`;
    const email = approvalEmail({ state, wait, approver, link });
    try {
      // Once per wait and approver, whichever delivery gets here first, and never again on a retry.
      await deps.ledger.once(email.id, { waitId: wait.id, to: approver }, async () => {
        await services.notifier!.send(email);
        return { sent: true };
      });
    } catch (error) {
      // One approver's email refused (SES's MessageRejected for an address it will not send to) kept it from
      // every approver after them, on every retry, and the delivery's error named neither run nor approver:
      // each approver is tried, each failure said, and the first thrown after, so the delivery retries it.
      deps.log.error({ event: 'approval-email-failed', runId: state.runId, waitId: wait.id, approver, error: errorMessage(error) }, 'the approval email was not sent; the delivery is retried');
      failed.push(error);
      continue;
    }
    deps.log.info({ event: 'approval-requested', runId: state.runId, waitId: wait.id, approver, link: maskedLink(link) }, 'approval requested');
    links.push(link);
  }
  if (failed.length) throw failed[0];
  return links;
}

async function matchEarlyEvent(deps: DriveDeps, state: RunState, wait: WaitRecord): Promise<boolean> {
  const events = deps.waits?.events;
  if (!events || !wait.event) return false;
  const since = wait.startedAt - (deps.waits?.earlyEventMs ?? DEFAULT_EARLY_EVENT_MS);
  const used = answeredEventIds(state);
  const kept = (await events.find(wait.event.type, wait.event.key, since)).filter((e) => !used.has(e.id));
  // An event whose payload is lost (its S3 object gone or damaged) answers nothing: the model would act on
  // an event without what it says. The wait goes on to a later event or its deadline; the event sent again
  // (its sender's retry, the same id or another) answers the wait with its payload in hand.
  for (const lost of kept.filter((e) => e.unreadable !== undefined)) {
    deps.log.error(
      { event: 'early-event-unreadable', runId: state.runId, waitId: wait.id, eventId: lost.id, type: lost.type, key: lost.key, error: lost.unreadable },
      `event ${lost.id} (${lost.type}/${lost.key}) came before this wait but its payload cannot be read, so it answers no wait; send the event again to resume the run`,
    );
  }
  const early = kept.find((e) => e.unreadable === undefined);
  if (!early) return false;
  try {
    const outcome = await answerWait(deps, { runId: state.runId, waitId: wait.id, answer: eventAnswer(early) });
    deps.log.info({ event: 'early-event-matched', runId: state.runId, waitId: wait.id, eventId: early.id, outcome: outcome.outcome }, 'an event that came before its wait resumed it');
    return outcome.outcome !== 'refused';
  } catch (error) {
    deps.log.warn({ event: 'early-event-error', runId: state.runId, error: errorMessage(error) }, 'could not apply an early event; the delivery will be retried');
    throw error;
  }
}
