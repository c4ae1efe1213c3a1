import * as z from 'zod';
import type { ToolDefinition } from '../agent.ts';
import { InvalidInputError } from '../core/errors.ts';
import { DEFAULT_WAIT_MS, EVENT_NAME, MAX_WAIT_MS, WaitRequest, checkApprovers, checkWaitDuration } from '../core/waits.ts';

/**
 * The wait tools an agent can offer the model. Each is a tool like any other whose `run` returns a
 * WaitRequest instead of a result: the engine saves the run as waiting and the worker moves on. Who may
 * approve, and how long anything may wait, is the agent's to set, never the model's.
 */

export interface ApprovalToolOptions {
  /** Email addresses allowed to approve (the email goes to each; any one answer decides). */
  approvers: string[];
  /** How long the approval may take before the run resumes with "timed out" (default 3 days). */
  timeoutMs?: number;
  name?: string;
  description?: string;
}

/**
 * A longest wait the model names in whole seconds. Under one second its `seconds` field could take no value
 * at all (at most 0), and the tool's description told the model it may wait "at most 0 seconds".
 */
function checkSecondsCap(what: string, ms: number | undefined): void {
  checkWaitDuration(what, ms);
  if (ms !== undefined && ms < 1000) {
    throw new InvalidInputError(`${what} must be at least 1000 ms: the model asks for whole seconds, so under 1 s it could ask for none; got ${ms}`);
  }
}

export function requestApproval(options: ApprovalToolOptions): ToolDefinition<{ request: string; details?: string }> {
  const approvers = [...(options.approvers ?? [])];
  checkApprovers('requestApproval', approvers);
  checkWaitDuration('requestApproval timeoutMs', options.timeoutMs);
  const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS.approval;
  return {
    name: options.name ?? 'request_approval',
    description: options.description ?? 'Ask a person to approve the next action before you take it. Say exactly what will be done and why. The run pauses until they approve or reject, or the request times out; you then see their answer as this step\'s result. Call it before any risky or irreversible action.',
    input: z.object({
      request: z.string().min(1).max(2000).describe('What is to be approved, as the approver will read it'),
      details: z.string().max(8000).optional().describe('Anything the approver needs to decide: the exact command, its arguments, its impact'),
    }),
    sideEffect: false,
    run: ({ request, details }) => new WaitRequest({
      kind: 'approval', approvers, timeoutMs, request: details ? `${request}\n\n${details}` : request,
    }),
  };
}

export interface EventToolOptions {
  /** Event types the model may wait for; any type matching the naming rule when absent. */
  types?: string[];
  /** The longest wait the model may ask for, and the default when it names none (1 day). */
  maxTimeoutMs?: number;
  name?: string;
  description?: string;
}

export function waitForEvent(options: EventToolOptions = {}): ToolDefinition<{ type: string; key: string; timeoutSeconds?: number }> {
  const badType = options.types?.find((t) => typeof t !== 'string' || !EVENT_NAME.test(t));
  if (badType !== undefined) throw new InvalidInputError(`waitForEvent: event type ${JSON.stringify(badType)} must match ${EVENT_NAME}`);
  checkSecondsCap('waitForEvent maxTimeoutMs', options.maxTimeoutMs);
  const max = Math.min(options.maxTimeoutMs ?? DEFAULT_WAIT_MS.event, MAX_WAIT_MS);
  const type = options.types?.length
    ? z.enum(options.types as [string, ...string[]])
    : z.string().regex(EVENT_NAME);
  return {
    name: options.name ?? 'wait_for_event',
    description: options.description ?? `Pause the run until an event of this type with this correlation key arrives (for example type "order.paid", key the order id), or until the timeout (at most ${Math.floor(max / 1000)} seconds). You then see the event, or "timed out", as this step's result.`,
    input: z.object({
      type: type.describe('The event type to wait for'),
      key: z.string().regex(EVENT_NAME).describe('The correlation key: which instance of the event (an order id, a ticket number)'),
      timeoutSeconds: z.number().int().positive().max(Math.floor(max / 1000)).optional(),
    }),
    sideEffect: false,
    run: (input) => new WaitRequest({ kind: 'event', type: input.type, key: input.key, timeoutMs: (input.timeoutSeconds ?? max / 1000) * 1000 }),
  };
}

export interface SleepToolOptions {
  /** The longest sleep the model may ask for (default 7 days). */
  maxMs?: number;
  name?: string;
  description?: string;
}

export function sleepUntil(options: SleepToolOptions = {}): ToolDefinition<{ until?: string; seconds?: number }> {
  checkSecondsCap('sleepUntil maxMs', options.maxMs);
  const max = Math.min(options.maxMs ?? DEFAULT_WAIT_MS.sleep, MAX_WAIT_MS);
  return {
    name: options.name ?? 'sleep_until',
    description: options.description ?? `Pause the run until a time (an ISO 8601 "until") or for a number of seconds, at most ${Math.floor(max / 1000)} seconds ahead. Nothing runs meanwhile; the run continues after it.`,
    input: z.object({
      // Zod's own words, "Invalid ISO datetime", refused 2030-01-01T09:00:00 as though it were no date at all.
      until: z.iso.datetime({ offset: true, error: 'must be an ISO 8601 date and time with a time zone (Z or +hh:mm), such as 2030-01-01T09:00:00Z' })
        .optional().describe('When to continue, ISO 8601 with a time zone'),
      seconds: z.number().int().positive().max(Math.floor(max / 1000)).optional().describe('Or: how many seconds from now'),
    }).refine((v) => (v.until === undefined) !== (v.seconds === undefined), 'give exactly one of until and seconds'),
    sideEffect: false,
    // A time beyond the maximum is refused when the wait begins, and the model sees why.
    run: (input) => new WaitRequest(input.until !== undefined
      ? { kind: 'sleep', until: Date.parse(input.until), maxMs: max }
      : { kind: 'sleep', forMs: input.seconds! * 1000, maxMs: max }),
  };
}
