import { describe, expect, it } from 'vitest';
import { decodeState, encodeHead } from '../../lib/core/codec.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import {
  DEFAULT_WAIT_MS, MAX_WAIT_MS, answerFits, beginWait, deadlineAnswer, resolveWait, waitRecordFor, type WaitAnswer,
} from '../../lib/core/waits.ts';
import type { Decision } from '../../lib/core/state.ts';
import { stateAfter } from '../support/states.ts';

const NOW = 1_800_000_000_000;
const usage = { inputTokens: 100, outputTokens: 10, cacheWriteTokens: 0, cacheReadTokens: 0 };
const decision: Decision = { step: 3, tool: 'request_approval', input: { action: 'drop table old_rows' }, at: NOW - 5, usage, model: 'claude-x' };

describe('wait records', () => {
  it('gives every kind a deadline: its default, a chosen timeout, or the sleep time', () => {
    // An approver that is undefined (from a spec built by a program, not requestApproval) is refused, not a TypeError.
    expect(() => waitRecordFor({ kind: 'approval', approvers: [undefined as unknown as string], request: 'x' }, decision, 'wait-0000', NOW)).toThrow('approver undefined is not an email address');
    const approval = waitRecordFor({ kind: 'approval', approvers: ['Ops@Example.com'], request: 'drop old_rows' }, decision, 'wait-0001', NOW);
    expect(approval).toMatchObject({ kind: 'approval', step: 3, deadline: NOW + DEFAULT_WAIT_MS.approval, approvers: ['ops@example.com'], request: 'drop old_rows' });
    const event = waitRecordFor({ kind: 'event', type: 'order.paid', key: 'order-7', timeoutMs: 60_000 }, decision, 'wait-0002', NOW);
    expect(event).toMatchObject({ kind: 'event', deadline: NOW + 60_000, event: { type: 'order.paid', key: 'order-7' } });
    const sleep = waitRecordFor({ kind: 'sleep', until: NOW + 3_600_000 }, decision, 'wait-0003', NOW);
    expect(sleep.deadline).toBe(NOW + 3_600_000);
    // A time in the past wakes at once rather than never.
    expect(waitRecordFor({ kind: 'sleep', until: NOW - 10 }, decision, 'wait-0004', NOW).deadline).toBe(NOW);
  });

  it('refuses waits no run should enter: unbounded, without approvers, bad names', () => {
    const bad = [
      { kind: 'approval', approvers: [], request: 'x' },
      { kind: 'approval', approvers: ['not an email'], request: 'x' },
      { kind: 'approval', approvers: ['a@b.c'], request: 'x', timeoutMs: MAX_WAIT_MS + 1 },
      { kind: 'event', type: 'order paid', key: 'k' },
      { kind: 'event', type: 'order.paid', key: '' },
      { kind: 'event', type: 'order.paid', key: 'k', timeoutMs: 0 },
      { kind: 'sleep', until: NOW + MAX_WAIT_MS + 1 },
      { kind: 'sleep', until: Number.NaN },
    ] as const;
    for (const spec of bad) expect(() => waitRecordFor(spec as never, decision, 'wait-0005', NOW), JSON.stringify(spec)).toThrow(InvalidInputError);
  });

  it('says which answers fit which wait', () => {
    const approval = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'x' }, decision, 'wait-0006', NOW);
    expect(answerFits(approval, { kind: 'approved', by: 'OPS@example.com' })).toBeUndefined();
    expect(answerFits(approval, { kind: 'approved', by: 'mallory@example.com' })).toBe('"mallory@example.com" is not an approver of wait wait-0006');
    expect(answerFits(approval, { kind: 'event', type: 't', key: 'k', id: 'e1', payload: {} })).toMatch(/not an event wait/);
    expect(answerFits(approval, deadlineAnswer(approval))).toBeUndefined();
    const event = waitRecordFor({ kind: 'event', type: 'order.paid', key: 'order-7' }, decision, 'wait-0007', NOW);
    expect(answerFits(event, { kind: 'event', type: 'order.paid', key: 'order-8', id: 'e1', payload: {} })).toMatch(/does not match/);
    const sleep = waitRecordFor({ kind: 'sleep', until: NOW + 1 }, decision, 'wait-0008', NOW);
    expect(deadlineAnswer(sleep)).toEqual({ kind: 'woke' });
    expect(answerFits(sleep, { kind: 'timed-out' })).toMatch(/wakes/);
  });
});

describe("an approver's address", () => {
  const nfc = 'jos\u00e9@example.com';
  const nfd = 'jose\u0301@example.com';

  it('is the same approver with spaces around it, as the form or a script gives it', () => {
    const approval = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'x' }, decision, 'wait-0010', NOW);
    for (const by of [' ops@example.com', 'ops@example.com\n', '\tOPS@example.com ']) expect(answerFits(approval, { kind: 'approved', by }), JSON.stringify(by)).toBeUndefined();
    // What the model reads is the address, not the spaces.
    expect(JSON.parse(resolveWait(beginWait(stateAfter('run', 2), approval, NOW), { kind: 'approved', by: ' ops@example.com\n' }, NOW, 'w').record.result.text))
      .toMatchObject({ approval: 'approved', by: 'ops@example.com' });
  });

  it('is the same approver with an accent written as one character or as a combining mark', () => {
    expect(nfc).not.toBe(nfd);
    const fromNfd = waitRecordFor({ kind: 'approval', approvers: [nfd], request: 'x' }, decision, 'wait-0011', NOW);
    expect(fromNfd.approvers).toEqual([nfc]);
    expect(answerFits(fromNfd, { kind: 'approved', by: nfc })).toBeUndefined();
    expect(answerFits(fromNfd, { kind: 'approved', by: nfd })).toBeUndefined();
    // A wait saved before approvers were kept in one form still takes either.
    const saved = { ...fromNfd, approvers: [nfd] };
    expect(answerFits(saved, { kind: 'approved', by: nfc })).toBeUndefined();
  });

  it('a refusal quotes the address as it was given', () => {
    const approval = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com', 'lead@example.com'], request: 'x' }, decision, 'wait-0012', NOW);
    expect(answerFits(approval, { kind: 'approved', by: 'ops@example.org\n' })).toBe('"ops@example.org\\n" is not an approver of wait wait-0012');
  });
});

describe('waiting and resuming', () => {
  const start = stateAfter('run', 2);
  const wait = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop old_rows' }, decision, 'wait-0009', NOW);

  it('a waiting run keeps the tool call in its wait record and survives the codec', () => {
    const waiting = beginWait({ ...start, failures: 1, lastError: 'x' }, wait, NOW);
    expect(waiting).toMatchObject({ status: 'waiting', step: 2, failures: 0, wait: { id: 'wait-0009', step: 3 } });
    expect(waiting.lastError).toBeUndefined();
    expect(waiting.usage.inputTokens).toBe(start.usage.inputTokens + 100);
    const decoded = decodeState({ runId: 'run', version: 4, status: 'waiting', head: encodeHead(waiting), steps: waiting.steps.map((s) => JSON.stringify(s)), workerId: 'w', updatedAt: NOW });
    expect(decoded.wait).toEqual(wait);
  });

  it('an answer completes the waiting step with the answer as its result, counted once', () => {
    const waiting = beginWait(start, wait, NOW);
    const answers: [WaitAnswer, boolean, RegExp][] = [
      [{ kind: 'approved', by: 'ops@example.com', comment: 'go' }, true, /"approval":"approved".*"comment":"go"/],
      [{ kind: 'rejected', by: 'ops@example.com', comment: 'not today' }, false, /"approval":"rejected"/],
      [{ kind: 'timed-out' }, false, /"timedOut":true/],
    ];
    for (const [answer, ok, text] of answers) {
      const { state, record } = resolveWait(waiting, answer, NOW + 1000, 'worker-b');
      expect(state).toMatchObject({ status: 'running', step: 3 });
      expect(state.wait).toBeUndefined();
      expect(record).toMatchObject({ step: 3, tool: 'request_approval', input: decision.input, workerId: 'worker-b', result: { ok } });
      expect(record.result.text).toMatch(text);
      expect(state.usage).toEqual(waiting.usage);
      // The step carries the model call that chose it, counted once (when the wait began): its cost shows
      // per step, and the state after this step (show, fork) sums it.
      expect(record).toMatchObject({ usage, model: 'claude-x' });
    }
  });

  it("an approver's comment reaches the model whole, up to the page's 4,000 characters, whatever they are", () => {
    const waiting = beginWait(start, wait, NOW);
    // Three bytes each in UTF-8, or six once JSON escapes them: over the 4 KiB a result keeps inline.
    for (const comment of ['あ'.repeat(3999) + '!', '\u0001'.repeat(4000), `${'\u0001'.repeat(4000)} (from the inspector)`]) {
      const { record, blob } = resolveWait(waiting, { kind: 'rejected', by: 'ops@example.com', comment }, NOW + 1000, 'worker-b');
      expect(blob).toBeUndefined();
      expect(record.result.ref).toBeUndefined();
      expect(JSON.parse(record.result.text).comment).toBe(comment);
    }
  });

  it('refuses to resolve a run that is not waiting', () => {
    expect(() => resolveWait(start, { kind: 'timed-out' }, NOW, 'w')).toThrow(/not waiting/);
  });
});
