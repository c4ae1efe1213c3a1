import { randomUUID } from 'node:crypto';
import * as z from 'zod';
import { TOO_LONG_FOR_JSON, isTooLongForJson } from '../core/canonical-json.ts';
import { InvalidInputError, UnreadableCheckpointError, errorMessage } from '../core/errors.ts';
import type { RunState } from '../core/state.ts';
import { EVENT_NAME, answeredEventId, type IncomingEvent, type WaitAnswer } from '../core/waits.ts';
import type { AgentDefinition } from '../agent.ts';
import type { EventBuffer, RunEvent } from '../ports.ts';
import { answerWait, type AnswerDeps, type AnswerOutcome } from './answer.ts';

/** The deepest nesting an event payload may have. */
export const MAX_EVENT_DEPTH = 64;

function nestingDepth(value: unknown): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [item, depth] = stack.pop()!;
    if (depth > deepest) deepest = depth;
    if (deepest > MAX_EVENT_DEPTH) return deepest;
    if (item && typeof item === 'object') for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return deepest;
}

/** Runs one event answers at once. */
const ANSWER_CONCURRENCY = 16;

/** The largest event payload kept (EventBridge's own limit for an event). */
export const MAX_EVENT_BYTES = 256 * 1024;

export const eventInputSchema = z.object({
  type: z.string().regex(EVENT_NAME, 'an event type is 1-256 letters, digits or ._:/@+-'),
  key: z.string().regex(EVENT_NAME, 'a correlation key is 1-256 letters, digits or ._:/@+-'),
  // Half an emoji (a lone UTF-16 surrogate) is not Unicode: SQLite keeps it as bytes it reads back as three
  // U+FFFD, so an event kept before its wait answered under another id than its redelivery's, which then
  // answered the run's next wait too.
  id: z.string().min(1).max(256).refine((id) => id.isWellFormed(), 'an event id may not hold half of an emoji (a lone UTF-16 surrogate)').optional(),
  payload: z.unknown().optional(),
}).strict();
export type EventInput = z.infer<typeof eventInputSchema>;

/** An event from outside (the CLI, a program), checked by the API's rules; without an id it gets a random one. */
export function checkEvent(input: { type: string; key: string; payload?: unknown; id?: string }): EventInput & { id: string } {
  const parsed = eventInputSchema.safeParse(input);
  // A type or key no wait can name would be kept a day and match nothing: refused here instead.
  if (!parsed.success) throw new InvalidInputError(`invalid event: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return { ...parsed.data, id: parsed.data.id ?? randomUUID() };
}

export interface EmitDeps extends AnswerDeps {
  events: EventBuffer;
  /** Runs waiting for this (type, key) now. */
  waitingFor(type: string, key: string): Promise<{ runId: string; waitId: string; agent?: string }[]>;
  /**
   * Resume only runs of these agents: set where the queue is one agent's alone (SQS), so a run of another
   * agent sharing the table would get its message on a queue none of its workers read; that agent's own
   * events function answers it. Unset where each message carries its run's agent (the SQLite queue).
   */
  agents?: readonly string[];
}

/**
 * The payload as JSON, or a clear refusal: a program's emit (the CLI and the API parse JSON, so theirs
 * always is) may pass a BigInt, a value that contains itself, or a function, which the store could not
 * keep or would keep as something else.
 */
function payloadJson(payload: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(payload ?? null);
  } catch (error) {
    const why = isTooLongForJson(error) ? TOO_LONG_FOR_JSON : error instanceof RangeError ? 'it is nested too deeply' : errorMessage(error);
    throw new InvalidInputError(`the event payload cannot be stored as JSON (${why}); pass plain data`);
  }
  if (text === undefined) throw new InvalidInputError(`the event payload is a ${typeof payload}, which cannot be stored as JSON; pass plain data`);
  return text;
}

/**
 * An event arrives: keep it first, then resume every run waiting for it. The wait side saves its waiting
 * checkpoint first, then looks for kept events. Each side writes before it reads, so whichever comes second
 * sees the other; if both do, the version fence lets one resume win.
 */
/** Refuses a payload no wait may be answered with (InvalidInputError): too deep, or too large. */
export function checkEventPayload(payload: unknown): void {
  // Deep nesting would overflow the recursive walks a payload meets later (canonical JSON, the result
  // shown to the model): refuse it here, counted without recursion.
  if (nestingDepth(payload) > MAX_EVENT_DEPTH) throw new InvalidInputError(`the event payload is nested deeper than ${MAX_EVENT_DEPTH} levels, or contains itself`);
  const bytes = Buffer.byteLength(payloadJson(payload));
  if (bytes > MAX_EVENT_BYTES) throw new InvalidInputError(`the event payload is ${bytes} bytes; the limit is ${MAX_EVENT_BYTES}`);
}

export async function emitEvent(deps: EmitDeps, input: EventInput & { id: string }): Promise<{ event: RunEvent; fresh: boolean; resumed: AnswerOutcome[] }> {
  checkEventPayload(input.payload);
  const event: RunEvent = { id: input.id, type: input.type, key: input.key, payload: input.payload ?? null, receivedAt: deps.clock.now() };
  const fresh = await deps.events.put(event);
  let retry: { error: unknown } | undefined;
  // A redelivered event is matched again: the first delivery may have died before resuming anyone, and a
  // wait it did resume answers "already answered".
  const waiting = (await deps.waitingFor(event.type, event.key))
    .filter(({ agent }) => !deps.agents || agent === undefined || deps.agents.includes(agent));
  const outcomes: (AnswerOutcome | undefined)[] = [];
  const answer = async (index: number) => {
    const { runId, waitId } = waiting[index]!;
    try {
      outcomes[index] = await answerWait(deps, { runId, waitId, answer: eventAnswer(event) });
    } catch (error) {
      // One run the event cannot resume (its checkpoint unreadable, written by newer code, its write
      // refused) kept it from every run after it, on every delivery: each is answered, then the first
      // error a retry may get past is thrown. An unreadable run fails at its deadline; no retry helps it.
      deps.log.error({ event: 'event-answer-error', type: event.type, key: event.key, eventId: event.id, runId, waitId, error: errorMessage(error) }, 'the event could not resume a run waiting for it');
      if (!(error instanceof UnreadableCheckpointError)) retry ??= { error };
    }
  };
  // Several runs at a time: each answer is a read, a fenced write and a send of its own run, some 50 ms on
  // AWS, so one by one an event that hundreds of runs wait for outlasted the events function's minute, and
  // each retry, reading the runs it had answered again first, got less far than the one before.
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(ANSWER_CONCURRENCY, waiting.length) }, async () => {
    while (next < waiting.length) await answer(next++);
  }));
  const resumed = outcomes.filter((outcome) => outcome !== undefined);
  deps.log.info({ event: 'event-received', type: event.type, key: event.key, eventId: event.id, fresh, resumed: resumed.filter((r) => r.outcome === 'resumed').map((r) => r.runId) }, 'event received');
  if (retry) throw retry.error;
  return { event, fresh, resumed };
}

export function eventAnswer(event: RunEvent): WaitAnswer {
  return { kind: 'event', type: event.type, key: event.key, id: event.id, payload: event.payload };
}

/** Events that already answered a wait of this run: one event resumes one wait of a run, not every later one. */
export function answeredEventIds(state: Pick<RunState, 'steps'>): Set<string> {
  const ids = new Set<string>();
  for (const step of state.steps) {
    const id = answeredEventId(step);
    if (id !== undefined) ids.add(id);
  }
  return ids;
}

/**
 * The (type, key) an incoming event resumes waits on: the agent's `eventKey` when it has one, else the
 * event's detail-type as the type and `detail.key` (or `detail.correlationKey`) as the key.
 */
export function waitEventOf(agent: Pick<AgentDefinition, 'eventKey'>, event: IncomingEvent): EventInput | undefined {
  const read = readWaitEvent(agent, event);
  return 'unmatched' in read ? undefined : read;
}

/** As waitEventOf, saying why when the event names no wait: for the log of a function that drops it. */
export function readWaitEvent(agent: Pick<AgentDefinition, 'eventKey'>, event: IncomingEvent): EventInput | { unmatched: string } {
  const custom: unknown = agent.eventKey?.(event);
  // The agent's own code, given whatever the event holds: what it returns is checked, not trusted.
  if (custom != null && (typeof custom !== 'object' || !isOptionalString((custom as { type?: unknown }).type) || !isOptionalString((custom as { key?: unknown }).key))) {
    throw new TypeError(`the agent's eventKey must return { type, key } as strings, or undefined; it returned ${String(JSON.stringify(custom)).slice(0, 200)}`);
  }
  const named = custom as { type?: string; key?: string } | null | undefined;
  const detail = (event.detail ?? {}) as Record<string, unknown>;
  const type = named?.type ?? event.detailType;
  const key = named?.key ?? (typeof detail.key === 'string' ? detail.key : typeof detail.correlationKey === 'string' ? detail.correlationKey : undefined);
  const rule = '1-256 letters, digits or ._:/@+-';
  // AWS's own events have detail-types with spaces ("Object Created"): only the agent's eventKey names those.
  const rename = agent.eventKey ? '' : "; the agent's eventKey can name the wait it resumes";
  if (typeof type !== 'string' || !EVENT_NAME.test(type)) return { unmatched: `its type ${JSON.stringify(String(type).slice(0, 100))} is not ${rule}${rename}` };
  if (!key) {
    // An order number sent as a JSON number was told "no key", where the key is there in another type.
    const field = named?.key === undefined ? (['key', 'correlationKey'] as const).find((name) => detail[name] != null && typeof detail[name] !== 'string') : undefined;
    if (field) return { unmatched: `its detail.${field} is a ${Array.isArray(detail[field]) ? 'list' : typeof detail[field]} (${String(JSON.stringify(detail[field])).slice(0, 100)}), not text: send it as a string${rename}` };
    return { unmatched: `it has no key (detail.key or detail.correlationKey${agent.eventKey ? ", or the agent's eventKey" : ''})` };
  }
  if (!EVENT_NAME.test(key)) return { unmatched: `its key ${JSON.stringify(key.slice(0, 100))} is not ${rule}` };
  return { type, key, id: event.id, payload: event.detail ?? null };
}

const isOptionalString = (value: unknown): boolean => value === undefined || typeof value === 'string';
