import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { MAX_WAIT_MS } from '../../lib/core/waits.ts';
import { requestApproval, sleepUntil, waitForEvent } from '../../lib/waits/tools.ts';

describe('the wait tools refuse settings under which no wait could begin', () => {
  // At the wait, such a setting would be an error result the model sees: refused an approval, a model
  // could go on without one.
  it.each([
    ['an approval with no approver', () => requestApproval({ approvers: [] }), 'requestApproval needs at least one approver'],
    ['an approver that is not an email address', () => requestApproval({ approvers: ['ops'] }), 'requestApproval: approver "ops" is not an email address'],
    // `approvers: [process.env.APPROVER!]` with it unset: it passed, and the wait threw a TypeError when it began.
    ['an approver that is undefined', () => requestApproval({ approvers: ['ops@example.com', undefined as unknown as string] }), 'requestApproval: approver undefined (an environment variable not set?) is not an email address'],
    ['an approval timeout of 0', () => requestApproval({ approvers: ['ops@example.com'], timeoutMs: 0 }), 'requestApproval timeoutMs must be from 1 ms to 90 days (in ms), got 0'],
    ['an approval timeout past 90 days', () => requestApproval({ approvers: ['ops@example.com'], timeoutMs: MAX_WAIT_MS + 1 }), `requestApproval timeoutMs must be from 1 ms to 90 days (in ms), got ${MAX_WAIT_MS + 1}`],
    ['an event type no event can have', () => waitForEvent({ types: ['order paid'] }), 'waitForEvent: event type "order paid" must match'],
    ['an event timeout that is not a number', () => waitForEvent({ maxTimeoutMs: Number.NaN }), 'waitForEvent maxTimeoutMs must be from 1 ms to 90 days (in ms), got NaN'],
    ['a negative longest sleep', () => sleepUntil({ maxMs: -5 }), 'sleepUntil maxMs must be from 1 ms to 90 days (in ms), got -5'],
    // The model asks in whole seconds: under 1 s, `seconds` took no value at all and the description said
    // "at most 0 seconds".
    ['a longest sleep under a second', () => sleepUntil({ maxMs: 999 }), 'sleepUntil maxMs must be at least 1000 ms: the model asks for whole seconds, so under 1 s it could ask for none; got 999'],
    ['a longest event wait under a second', () => waitForEvent({ maxTimeoutMs: 1 }), 'waitForEvent maxTimeoutMs must be at least 1000 ms'],
  ])('%s', (_what, make, message) => {
    expect(make).toThrow(InvalidInputError);
    expect(make).toThrow(message);
  });

  it('takes settings within the bounds', () => {
    expect(requestApproval({ approvers: ['ops@example.com', 'lead@example.com'], timeoutMs: MAX_WAIT_MS }).name).toBe('request_approval');
    expect(waitForEvent({ types: ['order.paid'], maxTimeoutMs: 1000 }).name).toBe('wait_for_event');
    expect(sleepUntil({ maxMs: 60_000 }).name).toBe('sleep_until');
  });

  it('tells the model the longest wait it can ask for, in whole seconds it can give', () => {
    // 1.5 s: "at most 2 seconds" was rounded up past the 1 the input accepts.
    const sleep = sleepUntil({ maxMs: 1500 });
    expect(sleep.description).toContain('at most 1 seconds ahead');
    expect(sleep.input.safeParse({ seconds: 1 }).success).toBe(true);
    expect(sleep.input.safeParse({ seconds: 2 }).success).toBe(false);
    expect(waitForEvent({ maxTimeoutMs: 2500 }).description).toContain('(at most 2 seconds)');
  });
});
