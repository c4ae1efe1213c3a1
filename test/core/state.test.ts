import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../lib/core/canonical-json.ts';
import { decodeState, encodeHead, encodeStep, heldHead } from '../../lib/core/codec.ts';
import { ModelUnavailableError, NewerFormatError, PermanentError, UnreadableCheckpointError } from '../../lib/core/errors.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { MIGRATIONS, migrateHead } from '../../lib/core/migrations.ts';
import { FORMAT_VERSION, MAX_MODEL_UNAVAILABLE_FAILURES } from '../../lib/core/state.ts';
import { DECISION_FIELDS_IN_RECORD, cap, capReached, complete, completeStep, recordFailure, stepRecordOf } from '../../lib/core/transitions.ts';
import type { Decision } from '../../lib/core/state.ts';
import { canonicalValue } from '../../lib/core/canonical-json.ts';
import { beginWait, waitRecordFor } from '../../lib/core/waits.ts';
import { recordFor, stateAfter } from '../support/states.ts';

const stored = (head: string, steps: string[] = []) => ({ runId: 'r', version: 3, status: 'running' as const, head, steps, workerId: 'w', updatedAt: 0 });

describe('run state', () => {
  it('builds idempotency keys from run id and step', () => {
    expect(idempotencyKey('run', 3)).toBe('run/step-3');
  });

  it('serializes the same value to the same bytes whatever the key order', () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { z: 1, y: 2 }], c: 3 } })).toBe('{"a":{"c":3,"d":[2,{"y":2,"z":1}]},"b":1}');
  });

  it('a step\'s record is its decision but the version, with its result and worker, in key order: its canonical value is itself', () => {
    const full: Decision = {
      step: 4, tool: 'copy', input: { b: 1, a: 2 }, idempotencyKey: 'r/step-4', model: 'm',
      usage: { cacheReadTokens: 3, cacheWriteTokens: 0, inputTokens: 1, outputTokens: 2 }, at: 9, atVersion: 5,
    };
    const result = { bytes: 4, ok: true, text: 'done' };
    for (const decision of [full, { step: 1, tool: 't', input: {}, at: 2 } satisfies Decision]) {
      const record = stepRecordOf(decision, result, 'w');
      const kept = Object.fromEntries(Object.entries(decision).filter(([key]) => DECISION_FIELDS_IN_RECORD[key as keyof Decision] === 'kept'));
      expect(record).toStrictEqual({ ...kept, result, workerId: 'w' });
      // Keys in order at the top: canonicalValue copies only the tool's input, which the model chose.
      expect(Object.keys(record)).toEqual(Object.keys(record).sort());
      expect(canonicalJson(record)).toBe(canonicalJson({ ...decision, atVersion: undefined, result, workerId: 'w' }));
    }
    const inOrder = stepRecordOf({ ...full, input: { a: 2, b: 1 } }, result, 'w');
    expect(canonicalValue(inOrder)).toBe(inOrder);
  });

  it('a completed step leaves its attempts behind (decision, last error, retry note) and changes neither state it was given', () => {
    const base = stateAfter('r', 2);
    const failed = recordFailure({ ...base, pending: { step: 3, tool: 'write_row', input: {}, at: 1 } }, new Error('boom'), 5, { retryNote: 'call one tool' });
    expect(failed).toMatchObject({ lastError: 'boom', retryNote: 'call one tool', pending: { step: 3 } });
    const before = JSON.stringify(failed);
    const done = completeStep(failed, recordFor('r', 3), 6);
    expect(Object.keys(done)).not.toEqual(expect.arrayContaining(['pending']));
    for (const field of ['pending', 'lastError', 'retryNote']) expect(field in done).toBe(false);
    expect(done).toMatchObject({ step: 3, failures: 0, updatedAt: 6 });
    expect(JSON.stringify(failed)).toBe(before);
    // With nothing to leave behind: a new state all the same, the old one as it was.
    const next = completeStep(done, recordFor('r', 4), 7);
    expect(next).not.toBe(done);
    expect(done.step).toBe(3);
    expect(done.steps).toHaveLength(3);
    expect(next.steps).toHaveLength(4);
  });

  it('decodes what it encodes', () => {
    const state = stateAfter('r', 3);
    const decoded = decodeState(stored(encodeHead(state), state.steps.map(encodeStep)));
    expect(decoded).toEqual(state);
  });

  it('a head the worker wrote is held decoded: the same value a load of its text decodes, for every kind of head', () => {
    const base = stateAfter('r', 3);
    const usage = { inputTokens: 100, outputTokens: 5, cacheWriteTokens: 0, cacheReadTokens: 80 };
    const decision = { step: 4, tool: 'approve', input: { n: 4 }, usage, at: 1, model: 'claude-x' };
    const heads = [
      base,
      recordFailure(base, new Error('flaky'), 2, { retryNote: 'try again' }),
      { ...base, budget: { tokens: 5_000, usd: 1.5 }, forkedFrom: { runId: 'parent', step: 2, version: 3 } },
      beginWait(base, waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop old_rows' }, decision, 'wait-0001', 2), 2),
      beginWait(base, waitRecordFor({ kind: 'event', type: 'order.paid', key: 'o-7' }, decision, 'wait-0002', 2), 2),
      complete(base, 'all done', usage, 3),
      // Fields set to undefined, in the head and inside its wait: its text has none of them.
      { ...base, lastError: undefined, retryNote: undefined },
      beginWait(base, { ...waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'r' }, decision, 'wait-0003', 2), request: undefined, model: undefined }, 2),
    ];
    for (const state of heads) {
      const text = encodeHead(state);
      const loaded = decodeState(stored(text, state.steps.map(encodeStep)));
      const held = decodeState({ ...stored(text), stepsAfter: 3 }, { from: 0, steps: state.steps, condensed: [], head: heldHead(text, state) });
      // Strictly: an undefined field anywhere in the held head, or a part of another class, fails it.
      expect(held).toStrictEqual(loaded);
      // Equal as stored, too: no key the decoder leaves out (an undefined field, a wait's format) is held.
      expect(canonicalJson(held)).toBe(canonicalJson(loaded));
      expect(Object.keys(held).sort()).toEqual(Object.keys(loaded).sort());
    }
  });

  it('a held head is used only for its own text: any other head at the load is decoded (and checked)', () => {
    const state = stateAfter('r', 3);
    const after3 = (head: string) => ({ ...stored(head), stepsAfter: 3 });
    const held = { from: 0, steps: state.steps, condensed: [], head: { ...heldHead(encodeHead(state), state), value: { ...heldHead(encodeHead(state), state).value, goal: 'held' } } };
    expect(decodeState(after3(encodeHead(state)), held).goal).toBe('held');
    const other = encodeHead({ ...state, goal: 'written by another worker' });
    expect(decodeState(after3(other), held).goal).toBe('written by another worker');
    expect(() => decodeState(after3(other.replace('"goal"', '"gaol"')), held)).toThrow(/gaol/);
  });

  it('refuses a newer state format without touching it, and an unreadable one as unreadable', () => {
    const state = stateAfter('r', 0);
    const newer = JSON.stringify({ ...JSON.parse(encodeHead(state)), formatVersion: FORMAT_VERSION + 1 });
    expect(() => decodeState(stored(newer))).toThrow(NewerFormatError);
    expect(() => decodeState(stored('{"formatVersion":1'))).toThrow(UnreadableCheckpointError);
    expect(() => decodeState(stored(JSON.stringify({ formatVersion: 1, runId: 'r' })))).toThrow(/unreadable/);
    // A head that claims more steps than are stored is unreadable, not silently short.
    expect(() => decodeState(stored(encodeHead(stateAfter('r', 2)), []))).toThrow(/2 steps, found 0/);
  });

  it('migrates an old head format on load', () => {
    MIGRATIONS.head[0] = (head) => ({ ...head, goal: `${String(head.objective)}` });
    try {
      const migrated = migrateHead({ formatVersion: 0, objective: 'old goal' });
      expect(migrated).toMatchObject({ formatVersion: FORMAT_VERSION, goal: 'old goal' });
    } finally {
      delete MIGRATIONS.head[0];
    }
    expect(() => migrateHead({ formatVersion: 0 })).toThrow(/no migration from head format 0/);
  });

  it('reads a format-1 head (written before waits existed) as it was', () => {
    const state = stateAfter('r', 2);
    const format1 = JSON.stringify({ ...JSON.parse(encodeHead(state)), formatVersion: 1 });
    const decoded = decodeState(stored(format1, state.steps.map((s) => JSON.stringify(s))));
    expect(decoded).toMatchObject({ formatVersion: FORMAT_VERSION, goal: state.goal, step: 2, status: 'running' });
    expect(decoded.wait).toBeUndefined();
  });
});

describe('the stop rule', () => {
  it('completes with the model\'s summary', () => {
    const done = complete(stateAfter('r', 2), 'All rows copied.', { inputTokens: 5, outputTokens: 1, cacheWriteTokens: 0, cacheReadTokens: 0 }, 9);
    expect(done).toMatchObject({ status: 'completed', summary: 'All rows copied.', step: 2 });
    expect(done.usage.inputTokens).toBe(5);
  });

  it('stops at the step cap', () => {
    const state = { ...stateAfter('r', 4), stepCap: 4 };
    expect(capReached(state)).toBe(true);
    expect(capReached({ ...state, stepCap: 5 })).toBe(false);
    expect(cap(state, 9)).toMatchObject({ status: 'capped', reason: expect.stringContaining('step cap of 4') });
  });

  it('fails a step on its third failure, or at once on a permanent error, keeping the steps done', () => {
    let state = stateAfter('r', 2);
    state = recordFailure(state, new Error('timeout'), 1);
    state = recordFailure(state, new Error('timeout'), 2);
    expect(state).toMatchObject({ status: 'running', failures: 2 });
    state = recordFailure(state, new Error('timeout'), 3);
    expect(state).toMatchObject({ status: 'failed', failures: 3, reason: 'step 3 failed 3 times; last error: timeout' });
    expect(state.steps).toHaveLength(2);
    const permanent = recordFailure(stateAfter('r', 1), new PermanentError('invalid request: prompt is too long'), 4);
    expect(permanent).toMatchObject({ status: 'failed', failures: 1, reason: 'step 2: invalid request: prompt is too long' });
  });

  it('waits out a model outage for 30 failures, and a failure of another kind after it still ends the run', () => {
    let state = stateAfter('r', 1);
    for (let n = 1; n < MAX_MODEL_UNAVAILABLE_FAILURES; n++) state = recordFailure(state, new ModelUnavailableError('529 overloaded'), n);
    expect(state).toMatchObject({ status: 'running', failures: 29, lastError: '529 overloaded' });
    expect(recordFailure(state, new ModelUnavailableError('529 overloaded'), 30)).toMatchObject({ status: 'failed', failures: 30, reason: 'step 2 failed 30 times; last error: 529 overloaded' });
    // Past the third failure, a tool's transient failure is not given the outage's longer wait.
    expect(recordFailure(state, new Error('database unavailable'), 30)).toMatchObject({ status: 'failed', reason: 'step 2 failed 30 times; last error: database unavailable' });
  });
});
