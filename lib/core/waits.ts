import * as z from 'zod';
import { canonicalJson } from './canonical-json.ts';
import { isInstanceOf, markClass } from './class-mark.ts';
import { InvalidInputError } from './errors.ts';
import { WAIT_KINDS, addUsage, type Decision, type RunState, type StepRecord, type WaitKind, type WaitRecord } from './state.ts';
import { completeStep } from './transitions.ts';
import { shapeResult, type ShapedResult } from './result.ts';

/**
 * A wait: a run that needs a person's answer, an event or a time saves a checkpoint with status
 * `waiting` and this record, and nothing computes until the answer comes. Every wait has a deadline; at
 * the deadline the run resumes with a "timed out" result the model sees. Pure: no I/O here.
 */

export { WAIT_KINDS, type WaitKind, type WaitRecord };

/** Defaults per kind: no wait is ever unbounded. */
export const DEFAULT_WAIT_MS: Record<WaitKind, number> = {
  approval: 3 * 24 * 3600 * 1000,
  event: 24 * 3600 * 1000,
  sleep: 7 * 24 * 3600 * 1000,
};
/** The longest any wait may last: beyond it a paused run is more likely forgotten than answered. */
export const MAX_WAIT_MS = 90 * 24 * 3600 * 1000;

/** An event type or correlation key: printable, bounded, safe in a key or a URL path segment. */
export const EVENT_NAME = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$/;
/** An approver: an email address (what the approval email is sent to and the token is bound to). */
export const APPROVER = /^[^\s@<>"',;]{1,64}@[^\s@<>"',;]{1,190}$/;

/**
 * An approver's address as waits keep and compare it: without the spaces around it (an address has none;
 * a form field or a script's variable may), in one Unicode form (an accented letter typed as one character
 * or as a letter and a combining mark), and in lower case. Otherwise `--as " ops@example.com"` was refused
 * as " ops@example.com is not an approver", reading like the approver's own address.
 */
export function approverKey(address: string): string {
  return address.trim().normalize('NFC').toLowerCase();
}

/**
 * An agent's own wait settings, checked when it loads (a wait tool's, a tool's `approval`): a wait that
 * could never begin would become an error result when the model asks for it, and a model refused an
 * approval might go on without one.
 */
export function checkWaitDuration(what: string, ms: number | undefined): void {
  if (ms !== undefined && !(Number.isFinite(ms) && ms >= 1 && ms <= MAX_WAIT_MS)) {
    throw new InvalidInputError(`${what} must be from 1 ms to ${MAX_WAIT_MS / 86_400_000} days (in ms), got ${ms}`);
  }
}

/**
 * Who may approve, as an agent gives it: at least one email address. By index: an approver that is
 * undefined (`[process.env.APPROVER!]` with it unset) is what find() returns for none found, and it passed,
 * to throw a TypeError when the wait began.
 */
export function checkApprovers(where: string, approvers: unknown): void {
  if (!Array.isArray(approvers) || !approvers.length) throw new InvalidInputError(`${where} needs at least one approver (approvers: ["ops@example.com"])`);
  const bad = approvers.findIndex((a) => typeof a !== 'string' || !APPROVER.test(a));
  if (bad >= 0) {
    const given: unknown = approvers[bad];
    throw new InvalidInputError(`${where}: approver ${given === undefined ? 'undefined (an environment variable not set?)' : JSON.stringify(given)} is not an email address`);
  }
}

/** The longest comment an approver may give (the page, the API and the CLI alike). */
export const MAX_COMMENT = 4000;
/**
 * An approval's answer is kept inline up to this many bytes, so the model reads its comment whole: 4,000
 * characters at 6 bytes each at worst (JSON's \u escapes), the inspector's note, the approver and the
 * rest. At the 4 KiB other results keep inline, 1,400 Japanese characters were cut to a 1,000-character
 * excerpt.
 */
const APPROVAL_INLINE_LIMIT = 32 * 1024;

/** How a wait ended: what the model sees as the step's result. */
export const waitAnswerSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('approved'), by: z.string(), comment: z.string().max(MAX_COMMENT).optional() }),
  z.object({ kind: z.literal('rejected'), by: z.string(), comment: z.string().max(MAX_COMMENT).optional() }),
  z.object({ kind: z.literal('event'), type: z.string(), key: z.string(), id: z.string(), payload: z.unknown() }),
  z.object({ kind: z.literal('woke') }),
  z.object({ kind: z.literal('timed-out') }),
]);
export type WaitAnswer = z.infer<typeof waitAnswerSchema>;

/** What a wait tool's `run` returns instead of a result: the engine turns it into a waiting checkpoint. */
export class WaitRequest {
  constructor(readonly spec: WaitSpec) {}

  /** A wait tool from another copy of this package returns that copy's WaitRequest (class-mark.ts). */
  static [Symbol.hasInstance](value: unknown): value is WaitRequest {
    return isInstanceOf(WaitRequest, value);
  }
}
markClass(WaitRequest, 'WaitRequest');

export type WaitSpec =
  | { kind: 'approval'; approvers: string[]; request: string; timeoutMs?: number }
  | { kind: 'event'; type: string; key: string; timeoutMs?: number }
  /** Until a time (epoch ms), or for a duration from when the wait begins; never past `maxMs` ahead. */
  | { kind: 'sleep'; until?: number; forMs?: number; maxMs?: number };

export function isWaitRequest(value: unknown): value is WaitRequest {
  return value instanceof WaitRequest;
}

/**
 * The wait record for a tool call that asked to wait; `inlineLimit` is the agent's, when it set one.
 * Throws InvalidInputError for a spec no wait can take.
 */
export function waitRecordFor(spec: WaitSpec, decision: Decision, id: string, now: number, inlineLimit?: number): WaitRecord {
  const base = {
    id, kind: spec.kind, step: decision.step, tool: decision.tool, input: decision.input,
    ...(decision.usage ? { usage: decision.usage } : {}), ...(decision.model ? { model: decision.model } : {}),
    decidedAt: decision.at, startedAt: now, ...(inlineLimit !== undefined ? { inlineLimit } : {}),
  };
  if (spec.kind === 'sleep') {
    const target = spec.until ?? (spec.forMs !== undefined ? now + spec.forMs : Number.NaN);
    if (!Number.isFinite(target)) throw new InvalidInputError('sleep_until needs a valid time or duration');
    const until = Math.max(now, Math.ceil(target));
    const max = Math.min(spec.maxMs ?? MAX_WAIT_MS, MAX_WAIT_MS);
    // In seconds, as the tool's description gives its longest, and with the latest time it takes: in whole
    // days, an hour's limit read "0 days away; the longest is 0 days", and 25 hours against a day "1 days".
    if (until - now > max) {
      throw new InvalidInputError(`sleep_until ${new Date(until).toISOString()} is ${Math.ceil((until - now) / 1000)} s ahead; the longest sleep is ${Math.floor(max / 1000)} s, to ${new Date(now + max).toISOString()} at the latest`);
    }
    return { ...base, deadline: until };
  }
  const timeoutMs = spec.timeoutMs ?? DEFAULT_WAIT_MS[spec.kind];
  if (!(timeoutMs > 0) || timeoutMs > MAX_WAIT_MS) throw new InvalidInputError(`a wait's timeout must be between 1 ms and ${MAX_WAIT_MS / 86_400_000} days, got ${timeoutMs} ms`);
  // A whole millisecond, never before its time: a timeout such as a day / 7 has a fraction, and the
  // approval link's expiry is this deadline.
  const deadline = Math.ceil(now + timeoutMs);
  if (spec.kind === 'approval') {
    if (!spec.approvers.length) throw new InvalidInputError('request_approval needs at least one approver');
    // By index: find() returns undefined for an approver that is undefined, as for none found.
    const bad = spec.approvers.findIndex((a) => typeof a !== 'string' || !APPROVER.test(a));
    if (bad >= 0) throw new InvalidInputError(`approver ${JSON.stringify(spec.approvers[bad]) ?? 'undefined'} is not an email address`);
    return { ...base, deadline, approvers: [...new Set(spec.approvers.map(approverKey))], request: spec.request };
  }
  for (const [what, value] of [['event type', spec.type], ['correlation key', spec.key]] as const) {
    if (!EVENT_NAME.test(value)) throw new InvalidInputError(`${what} ${JSON.stringify(value)} must match ${EVENT_NAME}`);
  }
  return { ...base, deadline, event: { type: spec.type, key: spec.key } };
}

/** The answer a wait gets when its deadline passes. */
export function deadlineAnswer(wait: WaitRecord): WaitAnswer {
  return wait.kind === 'sleep' ? { kind: 'woke' } : { kind: 'timed-out' };
}

/** Whether this answer may resolve this wait: an approval answers an approval, an event its event. */
export function answerFits(wait: WaitRecord, answer: WaitAnswer): string | undefined {
  switch (answer.kind) {
    case 'approved':
    case 'rejected':
      if (wait.kind !== 'approval') return `wait ${wait.id} is a ${wait.kind} wait, not an approval`;
      // Compared by key on both sides: a wait saved before its approvers were kept in one Unicode form.
      if (!wait.approvers?.some((approver) => approverKey(approver) === approverKey(answer.by))) {
        return `${JSON.stringify(answer.by)} is not an approver of wait ${wait.id}`;
      }
      return undefined;
    case 'event':
      if (wait.kind !== 'event') return `wait ${wait.id} is a ${wait.kind} wait, not an event wait`;
      if (wait.event?.type !== answer.type || wait.event.key !== answer.key) return `event ${answer.type}/${answer.key} does not match wait ${wait.id}`;
      return undefined;
    case 'woke':
      return wait.kind === 'sleep' ? undefined : `wait ${wait.id} is not a sleep`;
    case 'timed-out':
      return wait.kind === 'sleep' ? `a sleep wakes, it does not time out` : undefined;
  }
}

/** The step result text the model sees for an answered wait. */
export function answerText(wait: WaitRecord, answer: WaitAnswer, at: number): string {
  const when = new Date(at).toISOString();
  switch (answer.kind) {
    case 'approved':
    case 'rejected':
      return canonicalJson({ approval: answer.kind, by: answer.by.trim(), ...(answer.comment ? { comment: answer.comment } : {}), at: when });
    case 'event':
      return canonicalJson({ event: answer.type, key: answer.key, id: answer.id, payload: answer.payload ?? null, at: when });
    case 'woke':
      return canonicalJson({ woke: true, at: when });
    case 'timed-out':
      return canonicalJson({ timedOut: true, waited: wait.kind === 'approval' ? 'for approval' : `for event ${wait.event?.type}/${wait.event?.key}`, deadline: new Date(wait.deadline).toISOString(), at: when });
  }
}

/**
 * The id of the event that answered this step, when an event did. The answer text is canonical JSON, keys
 * sorted: "at", "event", "id" come before the payload, so they are there even when a large payload was cut
 * to an excerpt; a type or key cannot hold a quote.
 */
export function answeredEventId(record: Pick<StepRecord, 'waitId' | 'result'>): string | undefined {
  if (!record.waitId) return undefined;
  const match = /^\{"at":"[^"]*","event":"[^"]*","id":("(?:[^"\\]|\\.)*")/.exec(record.result.text);
  return match ? JSON.parse(match[1]!) as string : undefined;
}

/**
 * The deadline of the wait this step ended by timing out, or undefined when an answer ended it (or a sleep
 * woke): an answer that comes after the timeout is told the wait expired, not that someone answered it.
 */
export function timedOutDeadline(record: Pick<StepRecord, 'waitId' | 'result'>): number | undefined {
  if (!record.waitId) return undefined;
  try {
    const answer = JSON.parse(record.result.text) as { timedOut?: unknown; deadline?: unknown };
    return answer.timedOut === true && typeof answer.deadline === 'string' ? Date.parse(answer.deadline) : undefined;
  } catch {
    // An excerpt (a large event payload cut short) is an answer's, never a timeout's.
    return undefined;
  }
}

/** A rejection or a timeout is an answer the model acts on, not a failed step, but it is not "ok". */
export function answerOk(answer: WaitAnswer): boolean {
  return answer.kind === 'approved' || answer.kind === 'event' || answer.kind === 'woke';
}

/**
 * The run saved as waiting: the decision that asked to wait is kept in the wait record, not yet a step.
 * `countUsage: false` for a recorded decision whose usage a failed try counted already, as completeStep.
 */
export function beginWait(state: RunState, wait: WaitRecord, now: number, options: { countUsage?: boolean } = {}): RunState {
  const { pending: _pending, lastError: _e, retryNote: _n, ...rest } = state;
  return { ...rest, status: 'waiting', wait, failures: 0, usage: options.countUsage === false ? state.usage : addUsage(state.usage, wait.usage), updatedAt: now };
}

/**
 * The run resumed by an answer: the waiting step is completed with the answer as its result, and the run
 * is running again. The caller commits it conditional on the waiting version, so one answer wins.
 */
export function resolveWait(state: RunState, answer: WaitAnswer, now: number, workerId: string): { state: RunState; record: StepRecord; blob?: ShapedResult['blob'] } {
  const wait = state.wait;
  if (state.status !== 'waiting' || !wait) throw new InvalidInputError(`run ${state.runId} is not waiting`);
  const { wait: _wait, ...rest } = state;
  const approval = answer.kind === 'approved' || answer.kind === 'rejected';
  // An event's payload or a timeout is kept inline as the agent keeps a tool's output; an approval at least
  // at its own limit, so its comment is never an excerpt.
  const limit = approval ? Math.max(APPROVAL_INLINE_LIMIT, wait.inlineLimit ?? 0) : wait.inlineLimit;
  const shaped = shapeResult(answerText(wait, answer, now), answerOk(answer), limit);
  // The record carries the usage of the call that chose it, for its cost and the state after it (show,
  // fork); the run counted it when the wait began, so completing the step does not count it again.
  const record: StepRecord = {
    step: wait.step, tool: wait.tool, input: wait.input, at: wait.decidedAt,
    ...(wait.usage ? { usage: wait.usage } : {}), ...(wait.model ? { model: wait.model } : {}),
    result: shaped.result, workerId, waitId: wait.id,
  };
  return { state: completeStep({ ...rest, status: 'running' }, record, now, { countUsage: false }), record, ...(shaped.blob ? { blob: shaped.blob } : {}) };
}

/** An event from another system, in EventBridge's shape (what functions/events.ts receives). */
export interface IncomingEvent {
  id: string;
  source: string;
  detailType: string;
  time?: string;
  detail: unknown;
  /** EventBridge's own fields, when the event has them: a trigger may tell an account, a region or a resource apart. */
  account?: string;
  region?: string;
  /** The ARNs of the resources the event is about (an S3 bucket's, an instance's). */
  resources?: string[];
  /**
   * Set when EventBridge replays the event from an archive: it keeps its id, so its run id is the first
   * delivery's and it starts no second run (`retry` or `fork` that run instead).
   */
  replayName?: string;
}

/** Starts a run for each event that matches: an S3 object created, an application's own event. */
export interface EventTrigger {
  /** Matches EventBridge's `source` exactly, when given. */
  source?: string;
  /** Matches `detail-type` exactly, when given. */
  detailType?: string;
  /** The goal of the run the event starts; return undefined to start none for this event. */
  goal(event: IncomingEvent): string | undefined;
}

/** Who approved, when this step record is a wait's answer "approved" (an approval's answer is kept whole). */
export function approvedBy(record: Pick<StepRecord, 'waitId' | 'result'>): string | undefined {
  if (!record.waitId || !record.result.ok || !record.result.text.startsWith('{"approval":"approved"')) return undefined;
  try {
    const answer = JSON.parse(record.result.text) as { approval?: string; by?: unknown };
    return answer.approval === 'approved' && typeof answer.by === 'string' ? answer.by : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The approvals among these step records: the steps a person approved, who, and the tool that asked. A fork
 * copies them with the records, and its model reads each as given to it (a tool with `approval` does not:
 * lib/core/approval-gate.ts), so a fork says which it copied.
 */
export function approvalsAmong(records: readonly StepRecord[]): { step: number; tool: string; by: string }[] {
  return records.flatMap((record) => {
    const by = approvedBy(record);
    return by === undefined ? [] : [{ step: record.step, tool: record.tool, by }];
  });
}

/** How an earlier answer reads on a page or a command's line: "Already approved by ops@example.com at ...". */
export function describeAnswer(record: StepRecord): string {
  try {
    const answer = JSON.parse(record.result.text) as { approval?: string; by?: string; at?: string; timedOut?: boolean; comment?: string };
    if (answer.timedOut) return `Nobody answered in time: the run continued with "timed out" at ${answer.at}.`;
    if (answer.approval) return `Already ${answer.approval} by ${answer.by} at ${answer.at}${answer.comment ? `, with the comment: ${answer.comment}` : ''}.`;
  } catch {
    // An excerpt: say less rather than guess.
  }
  return `Already answered, at step ${record.step}.`;
}
