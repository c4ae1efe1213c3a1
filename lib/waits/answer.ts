import { decodeState } from '../core/codec.ts';
import { InvalidInputError, StaleVersionError, UnknownRunError } from '../core/errors.ts';
import { commitCancel } from '../commit-cancel.ts';
import type { RunState, StepRecord } from '../core/state.ts';
import { MAX_COMMENT, answerFits, answeredEventId, deadlineAnswer, describeAnswer, resolveWait, timedOutDeadline, type WaitAnswer } from '../core/waits.ts';
import type { Logger } from '../log.ts';
import type { BlobStore, CheckpointStore, Clock, RunQueue } from '../ports.ts';
import { sendAfterWrite, sendWithWrite } from '../send-with-write.ts';

/** What resuming a run needs: the engine's ports, nothing of the step loop. */
export interface AnswerDeps {
  store: CheckpointStore;
  blobs: BlobStore;
  queue: RunQueue;
  clock: Clock;
  workerId: string;
  codeVersion: string;
  log: Logger;
}

/** What became of an answer. Only `resumed` changed anything. */
export type AnswerOutcome =
  | { outcome: 'resumed'; runId: string; waitId: string; version: number; answer: WaitAnswer }
  /** The wait was answered before (by this answer or another); `record` is the step it completed. */
  | { outcome: 'already-answered'; runId: string; waitId: string; record: StepRecord }
  /** The deadline passed first: the run continued (or now continues) with "timed out". */
  | { outcome: 'expired'; runId: string; waitId: string; deadline: number }
  /**
   * The run is not waiting for this wait: it ended, was cancelled, or waits for something else (`current`:
   * the id of the wait it is in now, when it is waiting).
   */
  | { outcome: 'not-waiting'; runId: string; waitId: string; status: RunState['status']; current?: string }
  | { outcome: 'unknown-run'; runId: string; waitId: string }
  /** The answer does not fit the wait (not an approver, another event): nothing changed. */
  | { outcome: 'refused'; runId: string; waitId: string; reason: string };

/**
 * Resumes a waiting run with an answer. Resuming is a checkpoint write like any other: the waiting step
 * gets the answer as its result, conditional on the waiting version, then the next step is enqueued. Two
 * answers racing (two approvers, an approval and the deadline, an event twice) cannot both win: the
 * loser's write is stale, and it reports what the winner did. On the local file the write carries the
 * enqueue; elsewhere a crash between the two leaves a running run with no message, which the sweeper re-drives.
 */
export async function answerWait(deps: AnswerDeps, input: { runId: string; waitId: string; answer: WaitAnswer }): Promise<AnswerOutcome> {
  const { runId, waitId } = input;
  for (let attempt = 0; ; attempt++) {
    const stored = await deps.store.load(runId);
    if (!stored) return { outcome: 'unknown-run', runId, waitId };
    const state = decodeState(stored);
    const wait = state.wait;
    if (state.status === 'waiting' && stored.cancelRequested !== undefined) {
      // Cancelled while the step that began this wait ran: the cancel wins, the answer changes nothing.
      try {
        await commitCancel(deps, stored.version, state, stored.cancelRequested);
      } catch (error) {
        if (error instanceof StaleVersionError && attempt < 3) continue;
        throw error;
      }
      return { outcome: 'not-waiting', runId, waitId, status: 'cancelled' };
    }
    if (state.status !== 'waiting' || !wait || wait.id !== waitId) {
      const record = state.steps.findLast((s) => s.waitId === waitId);
      // The deadline came first (its timer, or a late answer before this one): this answer is too late,
      // as it is told when it finds the deadline passed itself, on the page and by the CLI's approve.
      const deadline = record && input.answer.kind !== 'timed-out' ? timedOutDeadline(record) : undefined;
      if (deadline !== undefined) return { outcome: 'expired', runId, waitId, deadline };
      if (record) {
        await resendIfRunning(deps, stored);
        return { outcome: 'already-answered', runId, waitId, record };
      }
      return { outcome: 'not-waiting', runId, waitId, status: state.status, ...(state.status === 'waiting' && wait ? { current: wait.id } : {}) };
    }
    const refused = answerFits(wait, input.answer);
    if (refused) return { outcome: 'refused', runId, waitId, reason: refused };
    // An event delivered again (EventBridge is at-least-once) after it resumed this run, which now waits
    // for the same type and key once more: it answered its own wait, and is not the later one's answer.
    const answered = input.answer.kind === 'event' ? findAnsweredBy(state, input.answer.id) : undefined;
    if (answered) return { outcome: 'already-answered', runId, waitId, record: answered };
    const now = deps.clock.now();
    const late = now >= wait.deadline && input.answer.kind !== deadlineAnswer(wait).kind;
    // A late answer changes nothing but moves the run on as its timer would have.
    const answer = late ? deadlineAnswer(wait) : input.answer;
    const resolved = resolveWait(state, answer, now, deps.workerId);
    const message = { runId, version: stored.version + 1 };
    try {
      if (resolved.blob) await deps.blobs.put(resolved.blob.ref, resolved.blob.data);
      const written = await deps.store.commit({
        runId, expectedVersion: stored.version, state: resolved.state, appended: resolved.record,
        workerId: deps.workerId, codeVersion: deps.codeVersion, ...sendWithWrite(deps.store, message),
      });
      deps.log.info({
        event: 'checkpoint', runId, step: resolved.record.step, version: written.version, workerId: deps.workerId,
        bytes: written.bytes, status: 'running', tool: resolved.record.tool, waitId, answer: answer.kind,
      }, 'wait answered');
      await sendAfterWrite(deps.store, deps.queue, message);
      if (late) return { outcome: 'expired', runId, waitId, deadline: wait.deadline };
      return { outcome: 'resumed', runId, waitId, version: written.version, answer };
    } catch (error) {
      // Another answer won the race: report what it did, on a fresh read.
      if (error instanceof StaleVersionError && attempt < 3) continue;
      throw error;
    }
  }
}

/**
 * An answer asked again finds the run running: the first may have written the answer and died before its
 * send (SQS refused it, the process was killed), where only the sweep, a stall later, moved the run. Its
 * latest message is sent again, deduplicated, as a repeated start and a repeated fork send theirs. The
 * local file's write carries the send: there, nothing is lost and the queue sends nothing twice.
 */
async function resendIfRunning(deps: Pick<AnswerDeps, 'queue'>, stored: { runId: string; version: number; status: string }): Promise<void> {
  if (stored.status === 'running') await deps.queue.redrive({ runId: stored.runId, version: stored.version });
}

/**
 * Answers a run's open approval, as its page would: as `by`, else the wait's first approver (whoever can
 * call this owns the store). A run that is unknown, not waiting, or waiting for something else is an
 * InvalidInputError (UnknownRunError) that says which, and changes nothing.
 */
export async function answerApproval(
  deps: AnswerDeps, runId: string, input: { decision: 'approve' | 'reject'; by?: string; comment?: string },
): Promise<AnswerOutcome> {
  checkDecision(input);
  const stored = await deps.store.load(runId);
  if (!stored) throw new UnknownRunError(runId);
  const state = decodeState(stored);
  const wait = state.wait;
  if (stored.status !== 'waiting' || !wait) {
    // A second answer to the approval the run waited for last, or one after its deadline fired: told what
    // became of that approval, as the page and the API tell it, not that the run is not waiting. A cancel
    // drops the wait it ends, so the last approval on record may be an earlier one: a cancelled run is
    // said to be cancelled. A fork's copied steps are its parent's: it never waited for their approvals.
    const answered = stored.status === 'cancelled' ? undefined : lastApproval(state);
    if (answered?.outcome === 'already-answered') await resendIfRunning(deps, stored);
    if (answered) return answered;
    throw new InvalidInputError(`run ${runId} is not waiting (it is ${stored.status})`);
  }
  if (wait.kind !== 'approval') throw new InvalidInputError(`run ${runId} waits for ${wait.kind === 'event' ? `event ${wait.event?.type}/${wait.event?.key}` : 'a time'}, not an approval`);
  // The page and the API refuse a longer one before they get here.
  if (input.comment !== undefined && input.comment.length > MAX_COMMENT) {
    throw new InvalidInputError(`a comment may be at most ${MAX_COMMENT.toLocaleString('en')} characters; this one has ${input.comment.length.toLocaleString('en')}`);
  }
  return answerWait(deps, {
    runId, waitId: wait.id,
    answer: { kind: input.decision === 'approve' ? 'approved' : 'rejected', by: input.by ?? wait.approvers?.[0] ?? '', ...(input.comment ? { comment: input.comment } : {}) },
  });
}

/**
 * A program may hand on what it was sent (a request body) unchecked: a decision that is neither approve nor
 * reject ('approved', a typo) is refused, where it was read as a rejection and resumed the run with it.
 */
function checkDecision(input: { decision: unknown; by?: unknown; comment?: unknown }): void {
  const shown = (value: unknown) => (typeof value === 'string' ? JSON.stringify(value) : value === undefined || value === null ? String(value) : (typeof value === 'object' ? 'an object' : `a ${typeof value}`));
  if (input?.decision !== 'approve' && input?.decision !== 'reject') {
    throw new InvalidInputError(`an approval's decision is "approve" or "reject", not ${shown(input?.decision)}`);
  }
  if (input.by !== undefined && (typeof input.by !== 'string' || !input.by.trim())) throw new InvalidInputError(`an approval's by is the approver's email, not ${shown(input.by)}`);
  if (input.comment !== undefined && typeof input.comment !== 'string') throw new InvalidInputError(`an approval's comment is text, not ${shown(input.comment)}`);
}

/**
 * What became of the last approval the run waited for, when it has one: answered, or timed out. Not one of
 * a fork's copied steps: `approve` on a fork made past its parent's approval said the fork's approval was
 * answered, by the parent's approver, for a run that never waited.
 */
function lastApproval(state: RunState): AnswerOutcome | undefined {
  for (let i = state.steps.length - 1; i >= 0; i--) {
    const record = state.steps[i]!;
    if (state.forkedFrom && record.step <= state.forkedFrom.step) return undefined;
    if (!record.waitId) continue;
    let answer: { approval?: unknown; timedOut?: unknown; waited?: unknown; deadline?: unknown };
    try {
      answer = JSON.parse(record.result.text) as typeof answer;
    } catch {
      return undefined;
    }
    const base = { runId: state.runId, waitId: record.waitId };
    if (answer.approval === 'approved' || answer.approval === 'rejected') return { outcome: 'already-answered', ...base, record };
    if (answer.timedOut === true && answer.waited === 'for approval' && typeof answer.deadline === 'string') {
      return { outcome: 'expired', ...base, deadline: Date.parse(answer.deadline) };
    }
    // The run's last wait was for something else: no approval of it to speak of.
    return undefined;
  }
  return undefined;
}

/** The step an event answered in this run, if it answered one. */
function findAnsweredBy(state: RunState, eventId: string): StepRecord | undefined {
  return state.steps.findLast((s) => answeredEventId(s) === eventId);
}

/**
 * What became of an answer to an approval, in one line: the CLI's approve and reject print it, and the
 * API's refusal carries it as its `error`, where a client reading `error` as every other refusal has it
 * found none on this route.
 */
export function describeApprovalOutcome(outcome: AnswerOutcome, decision: string): string {
  switch (outcome.outcome) {
    case 'resumed': return `run ${outcome.runId}: ${decision === 'approve' ? 'approved' : 'rejected'}; it continues at version ${outcome.version}`;
    case 'already-answered': return `run ${outcome.runId}: ${describeAnswer(outcome.record)} Nothing changed.`;
    // Past tense: said alike when this answer found the deadline passed and when the run ended long ago.
    case 'expired': return `run ${outcome.runId}: the approval expired at ${new Date(outcome.deadline).toISOString()}; the run went on with "timed out", not this answer`;
    case 'not-waiting': return outcome.current
      ? `run ${outcome.runId} waits for another answer now (wait ${outcome.current}), not for this approval`
      : `run ${outcome.runId} is not waiting for this approval (it is ${outcome.status})`;
    case 'unknown-run': return `unknown run: ${outcome.runId}`;
    case 'refused': return `refused: ${outcome.reason}`;
  }
}
