import { describe, expect, it } from 'vitest';
import { decodeRecords, decodeState, encodeDecision, encodeHead, encodeStep, encodeSummary, type StoredCheckpoint } from '../../lib/core/codec.ts';
import { condensedBlock } from '../../lib/core/condensed.ts';
import { NewerFormatError, UnknownFieldError, UnreadableCheckpointError } from '../../lib/core/errors.ts';
import { MIGRATIONS, migrateRecord } from '../../lib/core/migrations.ts';
import { FORMAT_VERSION, RECORD_FORMATS } from '../../lib/core/state.ts';
import { beginWait, waitRecordFor } from '../../lib/core/waits.ts';
import { blockCost } from '../../lib/llm/cost.ts';
import { decisionFor, stateAfter } from '../support/states.ts';

const stored = (input: { head: string; steps?: string[]; pending?: string; status?: 'running' | 'waiting'; summaries?: string[]; stepsAfter?: number }): StoredCheckpoint => ({
  runId: 'r', version: 5, status: input.status ?? 'running', head: input.head, steps: input.steps ?? [],
  ...(input.summaries ? { summaries: input.summaries } : {}), ...(input.stepsAfter ? { stepsAfter: input.stepsAfter } : {}),
  ...(input.pending ? { pending: input.pending } : {}), workerId: 'w', updatedAt: 0,
});

const json = (text: string) => JSON.parse(text) as Record<string, unknown>;

function waitingState() {
  const state = stateAfter('r', 2);
  const wait = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop it' }, { step: 3, tool: 'request_approval', input: {}, at: 1 }, 'wait-0001', 10);
  return beginWait(state, wait, 10);
}

describe('record formats', () => {
  it('versions every stored record kind; today\'s records of kinds at format 1 are written as they always were', () => {
    expect(RECORD_FORMATS).toEqual({ head: FORMAT_VERSION, step: 1, decision: 1, wait: 2, ledger: 1, summary: 2 });
    const state = stateAfter('r', 1);
    // Format 1 is the absence of a version: the bytes of a record are the bytes today's code writes.
    expect(encodeStep(state.steps[0]!)).toBe('{"at":2001,"idempotencyKey":"r/step-1","input":{"batch":1},"result":{"bytes":11,"ok":true,"text":"wrote row 1"},"step":1,"tool":"write_row","workerId":"worker-test"}');
    expect(json(encodeDecision(decisionFor('r', 2))).formatVersion).toBeUndefined();
    expect((json(encodeHead(waitingState())).wait as Record<string, unknown>).formatVersion).toBe(2);
    // An explicit format 1 reads the same as none.
    const explicit = JSON.stringify({ ...json(encodeStep(state.steps[0]!)), formatVersion: 1 });
    expect(decodeState(stored({ head: encodeHead(state), steps: [explicit] })).steps).toEqual(state.steps);
  });

  it('refuses a step record, a decision or a wait record of a newer format, saying which format is needed', () => {
    const state = stateAfter('r', 2);
    const steps = state.steps.map(encodeStep);
    const newerStep = JSON.stringify({ ...json(steps[1]!), formatVersion: 2 });
    const error = (() => { try { decodeState(stored({ head: encodeHead(state), steps: [steps[0]!, newerStep] })); } catch (e) { return e; } })();
    expect(error).toBeInstanceOf(NewerFormatError);
    expect((error as NewerFormatError).record).toBe('step 2');
    expect((error as NewerFormatError).formatVersion).toBe(2);
    expect((error as Error).message).toMatch(/step 2 .*format 2.*reads step format 1.*needs/);

    const newerDecision = JSON.stringify({ ...json(encodeDecision(decisionFor('r', 3))), formatVersion: 7 });
    expect(() => decodeState(stored({ head: encodeHead(state), steps, pending: newerDecision }))).toThrow(/decision .*format 7/);

    const waiting = waitingState();
    const head = json(encodeHead(waiting));
    const newerWait = JSON.stringify({ ...head, wait: { ...(head.wait as object), formatVersion: 3 } });
    expect(() => decodeState(stored({ head: newerWait, steps: waiting.steps.map(encodeStep), status: 'waiting' }))).toThrow(NewerFormatError);
  });

  it('refuses a block summary of a newer format or with a field it does not know; a bounded load needs the summaries to cover what it skipped', () => {
    const state = stateAfter('r', 230);
    const block = condensedBlock(state.steps.slice(0, 100));
    const bounded = (summaries: string[], after = 100) => stored({ head: encodeHead(state), steps: state.steps.slice(after).map(encodeStep), summaries, stepsAfter: after });
    expect(decodeState(bounded([encodeSummary(block)]))).toMatchObject({ stepsFrom: 100, condensed: [block] });
    expect(() => decodeState(bounded([JSON.stringify({ ...block, formatVersion: 3 })]))).toThrow(NewerFormatError);
    expect(() => decodeState(bounded([JSON.stringify({ ...block, tokens: 3 })]))).toThrow(/summary 1.*tokens/);
    expect(() => decodeState(bounded([encodeSummary({ ...block, cost: { usd: 1, uncachedUsd: 1, rate: 2 } as never })]))).toThrow(/summary 1.*cost\.rate/);
    expect(() => decodeState(bounded([]))).toThrow(/0 summaries do not fit 230 steps from step 101/);
    expect(() => decodeState(bounded([encodeSummary({ ...block, last: 99 })]))).toThrow(UnreadableCheckpointError);
  });

  it('writes a block summary at format 2, with its records\' cost, and reads one of format 1 (no cost) as it was', () => {
    const state = stateAfter('r', 230);
    const priced = state.steps.slice(0, 100).map((s) => ({ ...s, usage: { inputTokens: 1000, outputTokens: 100, cacheWriteTokens: 0, cacheReadTokens: 0 }, model: 'claude-sonnet-4-5' }));
    const block = condensedBlock(priced, blockCost);
    // $3 and $15 per million tokens: 100 x (0.003 + 0.0015).
    expect(block.cost).toEqual({ usd: expect.closeTo(0.45, 12), uncachedUsd: expect.closeTo(0.45, 12), priced: true, model: 'claude-sonnet-4-5' });
    const text = encodeSummary(block);
    expect(json(text).formatVersion).toBe(2);
    const bounded = (summary: string) => stored({ head: encodeHead(state), steps: state.steps.slice(100).map(encodeStep), summaries: [summary], stepsAfter: 100 });
    expect(decodeState(bounded(text)).condensed).toEqual([block]);
    // Format 1, as code before the cost wrote it: no formatVersion, no cost.
    const { cost: _cost, ...older } = block;
    expect(decodeState(bounded(JSON.stringify(older))).condensed).toEqual([older]);
  });

  it('refuses, never strips, a field it does not know, naming it', () => {
    const state = stateAfter('r', 2);
    const steps = state.steps.map(encodeStep);
    const withReviewer = JSON.stringify({ ...json(encodeDecision(decisionFor('r', 3))), reviewer: 'ops@example.com' });
    const refused = (() => { try { decodeState(stored({ head: encodeHead(state), steps, pending: withReviewer })); } catch (e) { return e; } })();
    expect(refused).toBeInstanceOf(UnknownFieldError);
    expect((refused as Error).message).toMatch(/decision.*reviewer/);
    // Nested fields too: a step's result, the head, a wait record.
    const step = json(steps[0]!);
    const oddResult = JSON.stringify({ ...step, result: { ...(step.result as object), mime: 'text/plain' } });
    expect(() => decodeState(stored({ head: encodeHead(state), steps: [oddResult, steps[1]!] }))).toThrow(/step 1.*result\.mime/);
    expect(() => decodeState(stored({ head: JSON.stringify({ ...json(encodeHead(state)), priority: 3 }), steps }))).toThrow(/head.*priority/);
    const waiting = waitingState();
    const head = json(encodeHead(waiting));
    const oddWait = JSON.stringify({ ...head, wait: { ...(head.wait as object), escalateTo: 'cto@example.com' } });
    expect(() => decodeState(stored({ head: oddWait, steps: waiting.steps.map(encodeStep), status: 'waiting' }))).toThrow(/wait.*escalateTo/);
    // Not readable is still unreadable (fails the run), not a newer format.
    const broken = JSON.stringify({ ...json(steps[0]!), result: 'ok' });
    const unreadable = (() => { try { decodeState(stored({ head: encodeHead(state), steps: [broken, steps[1]!] })); } catch (e) { return e; } })();
    expect(unreadable).toBeInstanceOf(UnreadableCheckpointError);
    expect(unreadable).not.toBeInstanceOf(NewerFormatError);
  });

  it('migrates each kind through a chain of small steps, one version at a time', () => {
    const added: [keyof typeof MIGRATIONS, number][] = [];
    try {
      // A pretend old step format 0 -> 1 renames a field; the chain applies it before validation.
      MIGRATIONS.step[0] = (record) => { const { output, ...rest } = record; return { ...rest, result: output }; };
      added.push(['step', 0]);
      const state = stateAfter('r', 1);
      const old = json(encodeStep(state.steps[0]!));
      const { result, ...rest } = old;
      const format0 = JSON.stringify({ ...rest, output: result, formatVersion: 0 });
      expect(decodeState(stored({ head: encodeHead(state), steps: [format0] })).steps).toEqual(state.steps);
      expect(migrateRecord('step', { formatVersion: 0, output: 1 })).toEqual({ result: 1, formatVersion: 1 });
    } finally {
      for (const [kind, version] of added) delete MIGRATIONS[kind][version];
    }
    expect(() => migrateRecord('decision', { formatVersion: 0 })).toThrow(/no migration from decision format 0/);
  });

  it('head 1 -> 2: a head written before waits reads as it was', () => {
    expect(MIGRATIONS.head[1]!({ formatVersion: 1, goal: 'g' })).toEqual({ formatVersion: 1, goal: 'g' });
    expect(migrateRecord('head', { formatVersion: 1, goal: 'g' })).toEqual({ formatVersion: RECORD_FORMATS.head, goal: 'g' });
  });

  it('wait 1 -> 2: a wait written before the agent\'s inlineLimit was recorded reads as it was, and its answer is shaped at the default', () => {
    expect(MIGRATIONS.wait[1]!({ formatVersion: 1, id: 'wait-0001' })).toEqual({ formatVersion: 1, id: 'wait-0001' });
    const waiting = waitingState();
    const head = json(encodeHead(waiting));
    const { formatVersion: _f, ...format1 } = head.wait as Record<string, unknown>;
    const decoded = decodeState(stored({ head: JSON.stringify({ ...head, wait: format1 }), steps: waiting.steps.map(encodeStep), status: 'waiting' }));
    expect(decoded.wait).toEqual(waiting.wait);
    expect(decoded.wait!.inlineLimit).toBeUndefined();
  });

  it('head 2 -> 3: a head written before budgets and forks reads as it was', () => {
    expect(MIGRATIONS.head[2]!({ formatVersion: 2, goal: 'g', status: 'capped' })).toEqual({ formatVersion: 2, goal: 'g', status: 'capped' });
    expect(migrateRecord('head', { formatVersion: 2, goal: 'g' })).toEqual({ formatVersion: 3, goal: 'g' });
  });
});

describe('step records read alone (decodeRecords)', () => {
  const texts = (steps: number[]) => steps.map((n) => encodeStep(stateAfter('alone', 5).steps[n - 1]!));

  it('gives steps after + 1 to through, checked as decodeState checks them', () => {
    expect(decodeRecords('alone', 6, texts([3, 4, 5]), 2, 5).map((r) => r.step)).toEqual([3, 4, 5]);
    expect(decodeRecords('alone', 6, [], 2, 2)).toEqual([]);
  });

  it('refuses a range with a record missing, at its end or inside it, or out of order: unreadable, not a shorter run', () => {
    expect(() => decodeRecords('alone', 6, texts([3, 4]), 2, 5)).toThrow(UnreadableCheckpointError);
    expect(() => decodeRecords('alone', 6, texts([3, 4]), 2, 5)).toThrow('steps 3-5: 2 records found');
    expect(() => decodeRecords('alone', 6, texts([3, 5, 4]), 2, 5)).toThrow('step 4: its record says step 5');
  });
});
