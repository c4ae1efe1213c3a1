import { describe, expect, it } from 'vitest';
import { decodeState, encodeStep } from '../../lib/core/codec.ts';
import { CONDENSE_AFTER, CONDENSE_BLOCK, condensedBlocks } from '../../lib/core/condense.ts';
import { RECORD_FORMATS, ZERO_USAGE } from '../../lib/core/state.ts';
import { EffectStillRunningError, PermanentError, StaleVersionError } from '../../lib/core/errors.ts';
import { complete, completeStep, recordFailure } from '../../lib/core/transitions.ts';
import { beginWait, resolveWait, waitRecordFor } from '../../lib/core/waits.ts';
import type { RunPosition } from '../../lib/core/run-order.ts';
import { approvalEmailKey, idempotencyKey } from '../../lib/core/keys.ts';
import type { CheckpointStore, Clock, IdempotencyLedger } from '../../lib/ports.ts';
import { META, decisionFor, newState, recordFor, stateAfter } from '../support/states.ts';
import { HeldEffect } from './idempotency-ledger-contract.ts';

export interface ContractSubject {
  store: CheckpointStore;
  /** A store on the same table or file whose writes take their time from `clock`. */
  storeAt(clock: Clock): CheckpointStore;
  /** Overwrites the latest head of a run with bytes no code can read. */
  corruptLatestHead(runId: string): Promise<void>;
  /** The idempotency ledger in the same file or table, whose records of a run deleteRun deletes. */
  ledger: IdempotencyLedger;
  /** That ledger in a process whose clock is `ms` behind the store's: its claims' leases ran out that long ago, as a frozen holder's. */
  ledgerBehind(ms: number): IdempotencyLedger;
}

let counter = 0;
const uniqueRunId = (label: string) => `${label}-${process.pid}-${Date.now()}-${counter++}`;

/**
 * The checkpoint store contract: every backend runs this same suite (SQLite here, DynamoDB Local for the
 * AWS runtime). Each assertion is a guarantee the engine relies on.
 */
export function checkpointStoreContract(name: string, subject: () => ContractSubject): void {
  describe(`CheckpointStore contract: ${name}`, () => {
    const s = () => subject().store;

    async function runWithSteps(label: string, steps: number) {
      const runId = uniqueRunId(label);
      await s().create(newState(runId), META);
      let version = 1;
      for (let n = 1; n <= steps; n++) {
        const r = await s().commit({ runId, expectedVersion: version, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
        version = r.version;
      }
      return { runId, version };
    }

    it('creates version 1 once; a second create of the same run id changes nothing', async () => {
      const runId = uniqueRunId('create');
      const first = await s().create(newState(runId, 'first goal'), META);
      expect(first).toMatchObject({ created: true, version: 1 });
      expect(first.bytes).toBeGreaterThan(0);
      const again = await s().create(newState(runId, 'another goal'), META);
      expect(again).toMatchObject({ created: false, version: 1 });
      const loaded = decodeState((await s().load(runId))!);
      expect(loaded.goal).toBe('first goal');
    });

    it('creates a run with step records already done (a fork): written by the create, loaded, continued', async () => {
      const runId = uniqueRunId('create-steps');
      const state = stateAfter(runId, 3);
      const created = await s().create(state, META);
      expect(created).toMatchObject({ created: true, version: 1 });
      const loaded = decodeState((await s().load(runId))!);
      expect(loaded.steps).toEqual(state.steps);
      expect(loaded.step).toBe(3);
      expect((await s().history(runId)).map((h) => [h.version, h.step, h.status])).toEqual([[1, 3, 'running']]);
      // The records are the run's own: a worker holding them reads only what comes after.
      expect((await s().load(runId, { afterStep: 3 }))!.steps).toEqual([]);
      const record = recordFor(runId, 4);
      await s().commit({ runId, expectedVersion: 1, state: completeStep(loaded, record, 9_000), appended: record, ...META });
      expect(decodeState((await s().load(runId))!).steps.map((x) => x.step)).toEqual([1, 2, 3, 4]);
      // A second create of the id, with other records, changes nothing.
      expect(await s().create(stateAfter(runId, 1), META)).toMatchObject({ created: false, version: 2 });
      expect(decodeState((await s().load(runId))!).steps).toEqual([...state.steps, record]);
    });

    it('creates a run with more step records than one write can carry', async () => {
      const runId = uniqueRunId('create-many');
      const state = stateAfter(runId, 130);
      expect(await s().create(state, META)).toMatchObject({ created: true, version: 1 });
      const loaded = decodeState((await s().load(runId))!);
      expect(loaded.steps).toEqual(state.steps);
      expect(await s().create(stateAfter(runId, 2), META)).toMatchObject({ created: false, version: 1 });
      expect(decodeState((await s().load(runId))!).steps).toHaveLength(130);
    });

    it('records a cancel request at a version without writing a checkpoint; later commits keep it', async () => {
      const { runId } = await runWithSteps('cancel', 1);
      const before = (await s().load(runId))!;
      const historyBefore = await s().history(runId);
      expect(before.cancelRequested).toBeUndefined();
      // Fenced on the run, and a miss changes nothing.
      await expect(s().requestCancel(uniqueRunId('cancel-nobody'), 1, 'by ops')).rejects.toBeInstanceOf(StaleVersionError);
      expect((await s().load(runId))!.cancelRequested).toBeUndefined();
      // Asked by one who read an older version of the run, still running: a step committed since, and the
      // request stands for the step running now. Written beside the latest version, which it returns.
      expect(await s().requestCancel(runId, 1, 'by ops at noon')).toBe(2);
      const after = (await s().load(runId))!;
      expect(after).toEqual({ ...before, cancelRequested: 'by ops at noon' });
      expect((await s().load(runId, { afterStep: 1 }))!.cancelRequested).toBe('by ops at noon');
      expect(await s().history(runId)).toEqual(historyBefore);
      // The step that was running when the cancel came commits, and the request stays for the next step.
      const record = recordFor(runId, 2);
      await s().commit({ runId, expectedVersion: 2, state: completeStep(decodeState(after), record, 9_000), appended: record, ...META });
      const stepped = (await s().load(runId))!;
      expect(stepped).toMatchObject({ version: 3, cancelRequested: 'by ops at noon' });
      // A run that ends, however it ends, has answered the request: a retry later starts without it.
      await s().commit({ runId, expectedVersion: 3, state: complete(decodeState(stepped), 'done anyway', undefined, 9_500), ...META });
      expect((await s().load(runId))!.cancelRequested).toBeUndefined();
      // A run that is not running (ended here; a waiting one too) takes no request, whatever version is given.
      await expect(s().requestCancel(runId, 3, 'by ops later')).rejects.toBeInstanceOf(StaleVersionError);
      await expect(s().requestCancel(runId, 4, 'by ops later')).rejects.toBeInstanceOf(StaleVersionError);
      expect((await s().load(runId))!.cancelRequested).toBeUndefined();
    });

    it('returns undefined for an unknown run', async () => {
      expect(await s().load(uniqueRunId('nobody'))).toBeUndefined();
    });

    it('round-trips the whole state without losing values', async () => {
      const runId = uniqueRunId('roundtrip');
      const state = newState(runId, 'migrate ✓ 数据 "quoted" \n newline');
      await s().create(state, META);
      const input = { nested: { list: [1, 2.5, null, 'x'], flag: false }, emoji: '🚀', big: 2 ** 53 - 1 };
      const record = { ...recordFor(runId, 1), input, result: { ok: false, text: 'line1\nline2\t"q"', bytes: 16 } };
      await s().commit({ runId, expectedVersion: 1, state: completeStep(state, record, 5_000), appended: record, ...META });
      const loaded = decodeState((await s().load(runId))!);
      expect(loaded.goal).toBe(state.goal);
      expect(loaded.steps).toEqual([record]);
      expect(loaded.step).toBe(1);
    });

    it('advances the version by one per commit and keeps every step record in order', async () => {
      const { runId, version } = await runWithSteps('advance', 5);
      expect(version).toBe(6);
      const loaded = (await s().load(runId))!;
      expect(loaded.version).toBe(6);
      const state = decodeState(loaded);
      expect(state.steps.map((x) => x.step)).toEqual([1, 2, 3, 4, 5]);
    });

    it('returns the head it wrote, the very text the next load returns (a worker holds it decoded)', async () => {
      const runId = uniqueRunId('head-text');
      await s().create(newState(runId), META);
      const written = await s().commit({ runId, expectedVersion: 1, state: stateAfter(runId, 1), appended: recordFor(runId, 1), ...META });
      const loaded = (await s().load(runId, { afterStep: 1 }))!;
      expect(written.head).toBeDefined();
      expect(loaded.head).toBe(written.head);
      expect(JSON.parse(written.head!)).toMatchObject({ runId, step: 1 });
    });

    it('loads only the step records after afterStep when asked, with the same head and decision', async () => {
      const { runId } = await runWithSteps('after-step', 4);
      await s().recordDecision(runId, 5, decisionFor(runId, 5));
      const full = (await s().load(runId))!;
      const tail = (await s().load(runId, { afterStep: 3 }))!;
      expect(tail.steps).toEqual(full.steps.slice(3));
      expect(tail.stepsAfter).toBe(3);
      expect({ ...tail, steps: undefined, stepsAfter: undefined }).toEqual({ ...full, steps: undefined, stepsAfter: undefined });
      const known = decodeState(full).steps.slice(0, 3);
      expect(decodeState(tail, known)).toEqual(decodeState(full));
      // A caller that holds every step (it ran the last one) gets the same head and decision, and no records.
      const warm = (await s().load(runId, { afterStep: 4 }))!;
      expect(warm.steps).toEqual([]);
      expect({ ...warm, steps: undefined, stepsAfter: undefined }).toEqual({ ...full, steps: undefined, stepsAfter: undefined });
      expect(decodeState(warm, decodeState(full).steps)).toEqual(decodeState(full));
      expect(await s().load(uniqueRunId('nobody'), { afterStep: 4 })).toBeUndefined();
    });

    it('rejects a stale write with StaleVersionError and changes nothing', async () => {
      const { runId } = await runWithSteps('stale', 2);
      const before = await s().load(runId);
      const historyBefore = await s().history(runId);
      await expect(s().commit({ runId, expectedVersion: 2, state: stateAfter(runId, 3), appended: recordFor(runId, 3), ...META }))
        .rejects.toBeInstanceOf(StaleVersionError);
      expect(await s().load(runId)).toEqual(before);
      expect(await s().history(runId)).toEqual(historyBefore);
    });

    it('lets exactly one of two concurrent writers on the same version win', async () => {
      const { runId } = await runWithSteps('race', 1);
      const attempt = (worker: string) => s().commit({ runId, expectedVersion: 2, state: stateAfter(runId, 2), appended: { ...recordFor(runId, 2), workerId: worker }, workerId: worker, codeVersion: 'test' });
      const results = await Promise.allSettled([attempt('a'), attempt('b'), attempt('c')]);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(StaleVersionError);
      const state = decodeState((await s().load(runId))!);
      expect(state.steps).toHaveLength(2);
    });

    it('records a decision once per step, fenced on the version, and returns it as pending', async () => {
      const { runId } = await runWithSteps('decision', 1);
      await expect(s().recordDecision(runId, 1, decisionFor(runId, 2))).rejects.toBeInstanceOf(StaleVersionError);
      await s().recordDecision(runId, 2, decisionFor(runId, 2, { rows: 10 }));
      await expect(s().recordDecision(runId, 2, decisionFor(runId, 2, { rows: 99 }))).rejects.toBeInstanceOf(StaleVersionError);
      const state = decodeState((await s().load(runId))!);
      expect(state.pending).toMatchObject({ step: 2, tool: 'write_row', input: { rows: 10 }, idempotencyKey: `${runId}/step-2` });
      // A failed attempt keeps the decision, so the retry runs the same call.
      await s().commit({ runId, expectedVersion: 2, state: recordFailure(state, new Error('boom'), 9_000), ...META });
      const retried = decodeState((await s().load(runId))!);
      expect(retried.pending?.input).toEqual({ rows: 10 });
      expect(retried.failures).toBe(1);
      const record = { ...recordFor(runId, 2), input: { rows: 10 } };
      await s().commit({ runId, expectedVersion: 3, state: completeStep(retried, record, 10_000), appended: record, ...META });
      const done = decodeState((await s().load(runId))!);
      expect(done.pending).toBeUndefined();
      expect(done.steps[1]!.input).toEqual({ rows: 10 });
    });

    it('counts restarts at a version without writing a checkpoint; the next commit resets them', async () => {
      const { runId } = await runWithSteps('restarts', 1);
      await s().recordDecision(runId, 2, decisionFor(runId, 2));
      const before = (await s().load(runId))!;
      const historyBefore = await s().history(runId);
      expect(before.restarts ?? 0).toBe(0);
      expect(await s().addRestarts(runId, 2, 1)).toBe(1);
      expect(await s().addRestarts(runId, 2, 1)).toBe(2);
      expect(await s().addRestarts(runId, 2, -1)).toBe(1);
      // Fenced on the version, and a miss changes nothing.
      await expect(s().addRestarts(runId, 1, 1)).rejects.toBeInstanceOf(StaleVersionError);
      await expect(s().addRestarts(uniqueRunId('restarts-nobody'), 1, 1)).rejects.toBeInstanceOf(StaleVersionError);
      const after = (await s().load(runId))!;
      expect(after).toEqual({ ...before, restarts: 1 });
      expect(decodeState(after).pending).toMatchObject({ step: 2 });
      expect(await s().history(runId)).toEqual(historyBefore);
      // A count below zero is kept as it is (a paused first delivery takes its start back).
      expect(await s().addRestarts(runId, 2, -2)).toBe(-1);
      expect((await s().load(runId))!.restarts).toBe(-1);

      const state = decodeState(after);
      await s().commit({ runId, expectedVersion: 2, state: recordFailure(state, new Error('boom'), 9_000), ...META });
      expect((await s().load(runId))!.restarts ?? 0).toBe(0);
      expect(await s().addRestarts(runId, 3, 1)).toBe(1);
      const record = recordFor(runId, 2);
      await s().commit({ runId, expectedVersion: 3, state: completeStep(decodeState((await s().load(runId))!), record, 10_000), appended: record, ...META });
      expect((await s().load(runId))!.restarts ?? 0).toBe(0);
    });

    it('keeps a dense history: one row per version with step, status, tool, idempotency key, worker and size', async () => {
      const { runId } = await runWithSteps('history', 3);
      const state = decodeState((await s().load(runId))!);
      await s().commit({ runId, expectedVersion: 4, state: complete(state, 'all done', undefined, 20_000), workerId: 'closer', codeVersion: 'v9' });
      const history = await s().history(runId);
      expect(history.map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
      expect(history.map((h) => h.step)).toEqual([0, 1, 2, 3, 3]);
      expect(history.map((h) => h.status)).toEqual(['running', 'running', 'running', 'running', 'completed']);
      expect(history[2]).toMatchObject({ tool: 'write_row', idempotencyKey: `${runId}/step-2`, workerId: 'worker-test', codeVersion: 'test' });
      expect(history[4]).toMatchObject({ workerId: 'closer', codeVersion: 'v9' });
      for (const h of history) expect(h.bytes).toBeGreaterThan(0);
    });

    it('reads the history a page at a time: the newest `limit` below `before`, oldest first, the pages adding up to the whole', async () => {
      const { runId } = await runWithSteps('history-pages', 6);
      const whole = await s().history(runId);
      expect(whole.map((h) => h.version)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect((await s().history(runId, { limit: 3 })).map((h) => h.version)).toEqual([5, 6, 7]);
      expect((await s().history(runId, { before: 5, limit: 3 })).map((h) => h.version)).toEqual([2, 3, 4]);
      expect((await s().history(runId, { before: 2, limit: 3 })).map((h) => h.version)).toEqual([1]);
      expect(await s().history(runId, { before: 1, limit: 3 })).toEqual([]);
      // Past the latest is from the latest; no limit is the rest; a page's rows are the whole's.
      expect((await s().history(runId, { before: 99, limit: 2 })).map((h) => h.version)).toEqual([6, 7]);
      expect(await s().history(runId, { before: 4 })).toEqual(whole.slice(0, 3));
      expect(await s().history(runId, { limit: 7 })).toEqual(whole);
      expect(await s().history(uniqueRunId('history-none'), { limit: 3 })).toEqual([]);
    });

    it('writes the same number of bytes per step at step 1 and at step 40', async () => {
      const { runId } = await runWithSteps('growth', 40);
      const history = await s().history(runId);
      const first = history.find((h) => h.step === 1)!.bytes;
      const last = history.find((h) => h.step === 40)!.bytes;
      // Only digits in the counters differ; a write that carried the history would be 40x larger.
      expect(Math.abs(last - first)).toBeLessThan(32);
    });

    it('lists runs by status and by last update', async () => {
      const { runId: doneRun, version } = await runWithSteps('list-done', 1);
      const state = decodeState((await s().load(doneRun))!);
      await s().commit({ runId: doneRun, expectedVersion: version, state: complete(state, 'ok', undefined, 30_000), ...META });
      const { runId: runningRun } = await runWithSteps('list-running', 1);
      const completed = await s().list({ status: 'completed', limit: 1000 });
      expect(completed.map((r) => r.runId)).toContain(doneRun);
      expect(completed.map((r) => r.runId)).not.toContain(runningRun);
      const running = await s().list({ status: 'running', limit: 1000 });
      expect(running.find((r) => r.runId === runningRun)).toMatchObject({ status: 'running', step: 1, version: 2, agent: 'test-agent' });
      const old = await s().list({ status: 'running', updatedBefore: 0, limit: 1000 });
      expect(old.map((r) => r.runId)).not.toContain(runningRun);
      // Stamped later than a moment: runs a clock ahead of the reader's wrote (the stall sweep's other look).
      const later = await s().list({ status: 'running', updatedAfter: 0, limit: 1000 });
      expect(later.map((r) => r.runId)).toContain(runningRun);
      const aheadOfAll = await s().list({ status: 'running', updatedAfter: Number.MAX_SAFE_INTEGER, limit: 1000 });
      expect(aheadOfAll.map((r) => r.runId)).not.toContain(runningRun);
      const between = await s().list({ status: 'running', updatedAfter: 0, updatedBefore: 1, limit: 1000 });
      expect(between.map((r) => r.runId)).not.toContain(runningRun);
    });

    it('pages through runs updated in the same millisecond: every run once, in the list order', async () => {
      // Long before every other test's runs, so as not to change what their lists show first.
      let now = 1_000;
      const clocked = subject().storeAt({ now: () => now });
      const tied = Array.from({ length: 7 }, () => uniqueRunId('page-tied'));
      for (const runId of tied) await clocked.create(newState(runId), META);
      now += 5;
      const later = Array.from({ length: 3 }, () => uniqueRunId('page-later'));
      for (const runId of later) await clocked.create(newState(runId), META);
      const ours = new Set([...tied, ...later]);
      const expected = [...later.sort().reverse(), ...tied.sort().reverse()];

      // Pages of 3, each after the last run of the one before, to the end of the list.
      const paged: string[] = [];
      let after: RunPosition | undefined;
      // Bounded: a store that ignored `after` would hand back its first page for ever.
      for (let pages = 0; pages < 500; pages++) {
        const page = await s().list({ status: 'running', limit: 3, ...(after ? { after } : {}) });
        paged.push(...page.map((r) => r.runId));
        if (page.length < 3) break;
        const last = page[page.length - 1]!;
        after = { updatedAt: last.updatedAt, runId: last.runId };
      }
      expect(new Set(paged).size).toBe(paged.length);
      expect(paged.filter((id) => ours.has(id))).toEqual(expected);
      // The same list as one page.
      expect((await s().list({ status: 'running', limit: 10_000 })).map((r) => r.runId)).toEqual(paged);
    });

    it('marks a run with an unreadable checkpoint failed with the reason, keeping the data', async () => {
      const { runId } = await runWithSteps('unreadable', 1);
      await subject().corruptLatestHead(runId);
      const stored = (await s().load(runId))!;
      expect(() => decodeState(stored)).toThrow(/unreadable/);
      const written = await s().markUnreadable(runId, stored.version, 'head is not valid JSON', META);
      expect(written.version).toBe(stored.version + 1);
      // The step from the store's own columns (the head cannot say), for the failure's log line.
      expect(written.step).toBe(1);
      const after = (await s().load(runId))!;
      expect(after.status).toBe('failed');
      expect(after.head).toBe(stored.head);
      const listed = (await s().list({ status: 'failed', limit: 1000 })).find((r) => r.runId === runId);
      expect(listed?.reason).toContain('not valid JSON');
      await expect(s().markUnreadable(runId, stored.version, 'again', META)).rejects.toBeInstanceOf(StaleVersionError);
    });

    it('loads a long run boundedly: the block summaries and only the records after the last summarised block', async () => {
      const runId = uniqueRunId('recent');
      await s().create(newState(runId), META);
      const summary = (block: number) => ({
        last: (block + 1) * CONDENSE_BLOCK, line: `block ${block} of ${runId}`,
        usage: { ...ZERO_USAGE, inputTokens: block + 1 },
      });
      let state = newState(runId);
      let version = 1;
      for (let n = 1; n <= 450; n++) {
        const record = recordFor(runId, n);
        state = completeStep(state, record, 3_000 + n);
        // The checkpoint that condenses a block writes its summary, once (steps 201, 301, 401).
        const due = condensedBlocks(n) > condensedBlocks(n - 1) ? [summary(condensedBlocks(n) - 1)] : [];
        version = (await s().commit({ runId, expectedVersion: version, state, appended: record, ...(due.length ? { summaries: due } : {}), ...META })).version;
      }
      const recent = (await s().load(runId, { recent: true }))!;
      expect(recent.summaries?.map((text) => JSON.parse(text))).toEqual([0, 1, 2].map((b) => ({ ...summary(b), formatVersion: RECORD_FORMATS.summary })));
      expect(recent.stepsAfter).toBe(300);
      expect(recent.steps).toHaveLength(150);
      expect(recent.steps.length).toBeLessThanOrEqual(CONDENSE_AFTER);
      const bounded = decodeState(recent);
      expect(bounded).toMatchObject({ step: 450, stepsFrom: 300, condensed: [summary(0), summary(1), summary(2)] });
      expect(bounded.steps.map((r) => r.step)).toEqual(Array.from({ length: 150 }, (_, i) => 301 + i));
      expect(bounded.steps).toEqual(state.steps.slice(300));
      // Every record stays: a plain load still reads them all, and a load after a step reads from there.
      const full = decodeState((await s().load(runId))!);
      expect(full.steps).toEqual(state.steps);
      expect(full.stepsFrom).toBeUndefined();
      expect((await s().load(runId, { recent: true, afterStep: 420 }))!).toMatchObject({ stepsAfter: 420, steps: state.steps.slice(420).map(encodeStep) });
      expect((await s().history(runId))).toHaveLength(451);

      // A commit that loses the fence writes none of its summaries.
      const record = recordFor(runId, 451);
      const next = completeStep(state, record, 9_000);
      await expect(s().commit({ runId, expectedVersion: version - 1, state: next, appended: record, summaries: [summary(3)], ...META })).rejects.toBeInstanceOf(StaleVersionError);
      expect((await s().load(runId, { recent: true }))!.summaries).toHaveLength(3);
      // Writing a stored summary again (a worker that did not know it was written) fails nothing.
      await s().commit({ runId, expectedVersion: version, state: next, appended: record, summaries: [summary(2)], ...META });
      expect((await s().load(runId, { recent: true }))!).toMatchObject({ stepsAfter: 300 });
      expect(decodeState((await s().load(runId, { recent: true }))!).steps).toHaveLength(151);
    });

    it('reads a range of step records alone: those of a fork, across a checkpoint with no record, none past the run or of no run', async () => {
      // A fork's first records are written by its create; the steps after a wait come a version later.
      const runId = uniqueRunId('records');
      const forked = stateAfter(runId, 3);
      await s().create(forked, META);
      let state = forked;
      let version = 1;
      for (let n = 4; n <= 40; n++) {
        if (n === 20) {
          // A checkpoint with no record (a failed attempt) between two steps.
          version = (await s().commit({ runId, expectedVersion: version, state: recordFailure(state, 'flaky', 5_000), ...META })).version;
        }
        const record = recordFor(runId, n);
        state = completeStep(state, record, 5_000 + n);
        version = (await s().commit({ runId, expectedVersion: version, state, appended: record, ...META })).version;
      }
      const all = (await s().load(runId))!.steps;
      expect(all).toHaveLength(40);
      for (const [after, through] of [[0, 40], [0, 1], [2, 5], [17, 22], [19, 20], [39, 40], [30, 60], [40, 50]] as const) {
        expect(await s().records(runId, { after, through })).toEqual(all.slice(after, through));
      }
      expect(await s().records(runId, { after: 5, through: 5 })).toEqual([]);
      expect(await s().records(uniqueRunId('nobody'), { after: 0, through: 5 })).toEqual([]);
    });

    it('a bounded load of a run with no summaries (written before them) reads every record', async () => {
      const { runId } = await runWithSteps('recent-none', 230);
      const recent = (await s().load(runId, { recent: true }))!;
      expect(recent.summaries).toEqual([]);
      expect(recent.stepsAfter ?? 0).toBe(0);
      expect(decodeState(recent).steps).toEqual(stateAfter(runId, 230).steps);
    });

    it('indexes a waiting run by its event and deadline, and forgets the wait when it ends', async () => {
      const { runId, version } = await runWithSteps('waits', 1);
      const type = `order.paid-${counter++}`;
      const decision = { step: 2, tool: 'wait_for_event', input: { type, key: 'order-7' }, at: 5_000 };
      const wait = waitRecordFor({ kind: 'event', type, key: 'order-7', timeoutMs: 60_000 }, decision, `wait-${runId}`, 6_000);
      const waiting = beginWait(stateAfter(runId, 1), wait, 6_000);
      const written = await s().commit({ runId, expectedVersion: version, state: waiting, ...META });
      expect(await s().waitingFor(type, 'order-7')).toEqual([{ runId, agent: 'test-agent', waitId: wait.id, version: written.version, deadline: 66_000 }]);
      expect(await s().waitingFor(type, 'order-8')).toEqual([]);
      expect((await s().dueWaits(66_000, 1000)).filter((w) => w.runId === runId)).toEqual([{ runId, agent: 'test-agent', waitId: wait.id, version: written.version, deadline: 66_000 }]);
      expect((await s().dueWaits(65_999, 1000)).filter((w) => w.runId === runId)).toEqual([]);
      // Only the agents asked for: a sweeper of one agent on a shared table.
      expect((await s().dueWaits(66_000, 1000, ['other-agent', 'test-agent'])).filter((w) => w.runId === runId)).toHaveLength(1);
      expect((await s().dueWaits(66_000, 1000, ['other-agent'])).filter((w) => w.runId === runId)).toEqual([]);
      const loaded = decodeState((await s().load(runId))!);
      expect(loaded.wait).toEqual(wait);

      const resolved = resolveWait(loaded, { kind: 'timed-out' }, 70_000, 'w');
      await s().commit({ runId, expectedVersion: written.version, state: resolved.state, appended: resolved.record, ...META });
      expect((await s().dueWaits(Number.MAX_SAFE_INTEGER, 1000)).filter((w) => w.runId === runId)).toEqual([]);
      // A store may keep a stale entry for the event (answers check the head); it must not offer the run as
      // waiting for the wait it had.
      const after = decodeState((await s().load(runId))!);
      expect(after.status).toBe('running');
      expect(after.steps[1]).toMatchObject({ step: 2, waitId: wait.id, result: { ok: false } });
    });

    it('pages through due waits that share a deadline, soonest first then by run id, each once', async () => {
      // More runs sleeping until one instant than a page holds: the sweep pages on after the last wait it
      // sent, where it was given the same first page every time and the rest waited for those to resolve.
      const due = 4e15 + Date.now() * 10;
      const label = uniqueRunId('due');
      const sleeping = async (suffix: string, deadline: number) => {
        const runId = `${label}-${suffix}`;
        const decision = { step: 1, tool: 'sleep_until', input: {}, at: due - 60_000 };
        const wait = waitRecordFor({ kind: 'sleep', until: deadline }, decision, `wait-${runId}`, due - 60_000);
        await s().create(newState(runId), META);
        await s().commit({ runId, expectedVersion: 1, state: beginWait(newState(runId), wait, due - 60_000), ...META });
        return runId;
      };
      const tied = await Promise.all(['g', 'c', 'a', 'i', 'e', 'b', 'h', 'd', 'f'].map((suffix) => sleeping(suffix, due)));
      const later = await sleeping('0', due + 1);
      const earlier = await sleeping('z', due - 1);
      const order = [earlier, ...tied.sort(), later];

      const seen: string[] = [];
      let after: { deadline: number; runId: string } | undefined = { deadline: due - 2, runId: '' };
      for (let pages = 0; pages < 20; pages++) {
        const page = await s().dueWaits(due + 1, 2, undefined, after);
        expect(page.length).toBeLessThanOrEqual(2);
        seen.push(...page.map((w) => w.runId));
        const last = page[page.length - 1];
        if (page.length < 2 || !last) break;
        after = { deadline: last.deadline, runId: last.runId };
      }
      expect(seen).toEqual(order);
      // A page that ends inside a millisecond goes on with the rest of it, for one agent's runs too.
      const page = await s().dueWaits(due + 1, 3, ['other-agent', 'test-agent'], { deadline: due, runId: order[3]! });
      expect(page.map((w) => w.runId)).toEqual(order.slice(4, 7));
      expect(page[0]).toMatchObject({ agent: 'test-agent', deadline: due, version: 2, waitId: `wait-${order[4]}` });
    });

    describe('deleteRun', () => {
      /** A running run of `steps` steps, its last with a summary if asked; `result(n)` applied under each step's key. */
      async function runWithEffects(runId: string, steps: number, result: (n: number) => unknown, summary: boolean) {
        await s().create(newState(runId), META);
        let state = newState(runId);
        let version = 1;
        for (let n = 1; n <= steps; n++) {
          const record = recordFor(runId, n);
          state = completeStep(state, record, 3_000 + n);
          const summaries = summary && n === steps ? [{ last: CONDENSE_BLOCK, line: `summary of ${runId}`, usage: ZERO_USAGE }] : [];
          version = (await s().commit({ runId, expectedVersion: version, state, appended: record, summaries, ...META })).version;
          await subject().ledger.once(idempotencyKey(runId, n), { n }, () => result(n));
        }
        return { state, version };
      }

      /** A run of `steps` steps with a summary written, ended by `end`; an effect applied under each step's key. */
      async function endedRun(label: string, steps: number, end: 'complete' | 'fail', runId = uniqueRunId(label)) {
        const { state, version: last } = await runWithEffects(runId, steps, (n) => ({ applied: `${runId} ${n}` }), true);
        const ended = end === 'complete' ? complete(state, 'done', undefined, 9_000) : recordFailure(state, new PermanentError('boom'), 9_000);
        const { version } = await s().commit({ runId, expectedVersion: last, state: ended, ...META });
        return { runId, version };
      }

      it('deletes an ended run with its checkpoints, records, summaries and idempotency records: the id starts anew', async () => {
        const { runId, version } = await endedRun('delete', 3, 'complete');
        // Runs whose ids begin with this one's: their keys sort beside its keys, and stay.
        const { runId: longer } = await endedRun('delete-longer', 1, 'fail', `${runId}0`);
        const { runId: dotted } = await endedRun('delete-dotted', 1, 'fail', `${runId}.x`);
        expect(await s().deleteRun(runId, version)).toBe(true);

        expect(await s().load(runId)).toBeUndefined();
        expect(await s().history(runId)).toEqual([]);
        expect((await s().list({ status: 'completed', limit: 1000 })).map((r) => r.runId)).not.toContain(runId);
        // Nothing of it left to finish.
        expect(await s().deleteRun(runId)).toBe(false);
        // The same id again, minutes later (on AWS not before SQS's deduplication window has passed: test/aws/
        // delete-run.test.ts), is a new run: version 1, no steps, no summaries of the old one.
        const later = subject().storeAt({ now: () => Date.now() + 10 * 60_000 });
        expect(await later.create(newState(runId, 'second life'), META)).toMatchObject({ created: true, version: 1 });
        const again = (await s().load(runId, { recent: true }))!;
        expect(again.summaries).toEqual([]);
        expect(decodeState(again)).toMatchObject({ goal: 'second life', step: 0, steps: [] });
        const record = recordFor(runId, 1, 'new row 1');
        await s().commit({ runId, expectedVersion: 1, state: completeStep(newState(runId), record, 3_001), appended: record, ...META });
        expect(decodeState((await s().load(runId))!).steps.map((x) => x.result.text)).toEqual(['new row 1']);
        // Its effects run again, under its own keys (other arguments are no reuse either): the old results are gone.
        expect(await subject().ledger.once(idempotencyKey(runId, 1), { n: 'new' }, () => ({ applied: 'again' }))).toEqual({ applied: 'again' });
        // The other runs' records are untouched.
        expect(await subject().ledger.once(idempotencyKey(longer, 1), { n: 1 }, () => ({ applied: 'twice' }))).toEqual({ applied: `${longer} 1` });
        expect(await subject().ledger.once(idempotencyKey(dotted, 1), { n: 1 }, () => ({ applied: 'twice' }))).toEqual({ applied: `${dotted} 1` });
        expect(decodeState((await s().load(longer))!).steps).toHaveLength(1);
        expect((await s().load(dotted))!.status).toBe('failed');
      });

      it('deletes what the run\'s waits left: its approval emails\' idempotency records, its event waits\' entries', async () => {
        const { runId, version: at } = await runWithSteps('delete-waits', 1);
        const type = `order.paid-${counter++}`;
        // An event wait, answered; then an approval wait, its email sent once, answered; then the run ends.
        const eventWait = waitRecordFor({ kind: 'event', type, key: 'order-9', timeoutMs: 60_000 }, { step: 2, tool: 'wait_for_event', input: {}, at: 5_000 }, `wait-e-${runId}`, 6_000);
        let version = (await s().commit({ runId, expectedVersion: at, state: beginWait(stateAfter(runId, 1), eventWait, 6_000), ...META })).version;
        expect((await s().waitingFor(type, 'order-9')).map((w) => w.runId)).toEqual([runId]);
        let answered = resolveWait(decodeState((await s().load(runId))!), { kind: 'timed-out' }, 70_000, 'w');
        version = (await s().commit({ runId, expectedVersion: version, state: answered.state, appended: answered.record, ...META })).version;
        const approval = waitRecordFor({ kind: 'approval', approvers: ['ann@example.com', 'bob@example.com'], request: 'ship it?', timeoutMs: 60_000 }, { step: 3, tool: 'request_approval', input: {}, at: 71_000 }, `wait-a-${runId}`, 72_000);
        version = (await s().commit({ runId, expectedVersion: version, state: beginWait(answered.state, approval, 72_000), ...META })).version;
        const emailKeys = approval.approvers!.map((approver) => approvalEmailKey(runId, approval.id, approver));
        for (const key of emailKeys) await subject().ledger.once(key, { to: key }, () => ({ sent: true }));
        answered = resolveWait(decodeState((await s().load(runId))!), { kind: 'timed-out' }, 140_000, 'w');
        version = (await s().commit({ runId, expectedVersion: version, state: answered.state, appended: answered.record, ...META })).version;
        version = (await s().commit({ runId, expectedVersion: version, state: complete(answered.state, 'done', undefined, 150_000), ...META })).version;

        expect(await s().deleteRun(runId, version)).toBe(true);
        // No entry names the run as waiting for the event, ended or not.
        expect((await s().waitingFor(type, 'order-9')).map((w) => w.runId)).toEqual([]);
        // The emails' records are gone: under the same keys the effect runs again.
        for (const key of emailKeys) expect(await subject().ledger.once(key, { to: key }, () => ({ sent: 'again' }))).toEqual({ sent: 'again' });
      });

      it('refuses a running or waiting run, and a version that is not the latest: nothing deleted', async () => {
        const { runId: running, version } = await runWithSteps('delete-running', 2);
        await expect(s().deleteRun(running, version)).rejects.toBeInstanceOf(StaleVersionError);
        expect(decodeState((await s().load(running))!).steps).toHaveLength(2);

        const { runId: waiting, version: before } = await runWithSteps('delete-waiting', 1);
        const decision = { step: 2, tool: 'sleep_until', input: {}, at: 5_000 };
        const wait = waitRecordFor({ kind: 'sleep', until: 99_000 }, decision, `wait-${waiting}`, 6_000);
        const slept = await s().commit({ runId: waiting, expectedVersion: before, state: beginWait(stateAfter(waiting, 1), wait, 6_000), ...META });
        await expect(s().deleteRun(waiting, slept.version)).rejects.toBeInstanceOf(StaleVersionError);
        expect((await s().load(waiting))!.status).toBe('waiting');

        // Failed at version 4; a retry made it running at 5 before the delete, fenced on 4, came.
        const { runId: failed, version: failedAt } = await endedRun('delete-retried', 2, 'fail');
        expect((await s().load(failed))!.status).toBe('failed');
        const retried = { ...decodeState((await s().load(failed))!), status: 'running' as const, reason: undefined };
        await s().commit({ runId: failed, expectedVersion: failedAt, state: retried, ...META });
        await expect(s().deleteRun(failed, failedAt)).rejects.toBeInstanceOf(StaleVersionError);
        expect((await s().load(failed))!.status).toBe('running');
        expect(await subject().ledger.once(idempotencyKey(failed, 1), { n: 1 }, () => ({ applied: 'twice' }))).toEqual({ applied: `${failed} 1` });

        const unknown = uniqueRunId('delete-unknown');
        await expect(s().deleteRun(unknown, 1)).rejects.toBeInstanceOf(StaleVersionError);
        expect(await s().deleteRun(unknown)).toBe(false);
      });

      /** A run of `steps` steps, running: each step's effect applied under its key. */
      async function runningRun(label: string, steps: number) {
        const runId = uniqueRunId(label);
        const { state, version } = await runWithEffects(runId, steps, (n) => `${runId} ${n}`, false);
        const fail = async () => (await s().commit({ runId, expectedVersion: version, state: recordFailure(state, new PermanentError('boom'), 9_000), ...META })).version;
        return { runId, fail };
      }

      it('refuses while an effect of the run still holds its key: nothing deleted, the refusal names the key and when to try again', async () => {
        const { runId, fail } = await runningRun('delete-held', 1);
        // Step 2's effect goes on after its try ended (a tool's timeoutMs), and the run failed.
        const key = idempotencyKey(runId, 2);
        const held = new HeldEffect();
        const done = subject().ledger.once(key, { n: 2 }, held.effect);
        await held.started();
        const version = await fail();

        const refused = await s().deleteRun(runId, version).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(EffectStillRunningError);
        expect(refused).toMatchObject({ runId, status: 'failed', key });
        expect((refused as EffectStillRunningError).retryAfterMs).toBeGreaterThan(0);
        expect((refused as EffectStillRunningError).message).toContain(`under idempotency key ${key}, whose claim ends at`);
        // Nothing deleted: the run, its records, its finished effect's result, the live claim.
        expect((await s().load(runId))!.status).toBe('failed');
        expect(decodeState((await s().load(runId))!).steps).toHaveLength(1);
        expect(await subject().ledger.once(idempotencyKey(runId, 1), { n: 1 }, () => 'twice')).toBe(`${runId} 1`);
        await expect(subject().ledger.once(key, { n: 2 }, () => 'beside it')).rejects.toThrow(`idempotency key ${key} is being applied by another attempt`);

        // Once the effect has finished, the delete goes.
        held.finish('applied');
        expect(await done).toBe('applied');
        expect(await s().deleteRun(runId, version)).toBe(true);
        expect(await s().load(runId)).toBeUndefined();
      });

      it('a holder whose effect outlived its claim and its run writes no record back: a new run of the id runs its own effects', async () => {
        // Two runs, each deleted while the holder of its step 1's effect is frozen: its lease ran out long
        // ago, so the delete does not wait for it. (Step 1, the step after the last of a run with none: the
        // keys a delete removes; a claim on a key past it is left, and a new claim of it waits its watch out.)
        const frozen = subject().ledgerBehind(10 * 60_000);
        const later = subject().storeAt({ now: () => Date.now() + 10 * 60_000 });
        const heldThenDeleted = async (label: string) => {
          const { runId, fail } = await runningRun(label, 0);
          const late = new HeldEffect();
          const lateDone = frozen.once(idempotencyKey(runId, 1), { n: 1 }, late.effect);
          await late.started();
          expect(await s().deleteRun(runId, await fail())).toBe(true);
          return { runId, late, lateDone };
        };

        // The holder comes back after the delete: its run is gone, and so is what it did.
        const a = await heldThenDeleted('delete-late-holder');
        a.late.finish('old 1');
        expect(await a.lateDone).toBe('old 1');
        // A new run of the id (on AWS once SQS's deduplication window has passed) runs its own effect.
        expect(await later.create(newState(a.runId, 'second life'), META)).toMatchObject({ created: true, version: 1 });
        expect(await subject().ledger.once(idempotencyKey(a.runId, 1), { n: 1 }, () => 'new 1')).toBe('new 1');

        // The holder comes back while a new run of the id holds the key: the new run's result stands.
        const b = await heldThenDeleted('delete-late-holder-b');
        expect(await later.create(newState(b.runId, 'second life'), META)).toMatchObject({ created: true, version: 1 });
        const fresh = new HeldEffect();
        const freshDone = subject().ledger.once(idempotencyKey(b.runId, 1), { n: 1 }, fresh.effect);
        await fresh.started();
        b.late.finish('old 2');
        expect(await b.lateDone).toBe('old 2');
        fresh.finish('new 2');
        expect(await freshDone).toBe('new 2');
        expect(await subject().ledger.once(idempotencyKey(b.runId, 1), { n: 1 }, () => 'twice')).toBe('new 2');
        expect(fresh.runs).toBe(1);
      });

      it('a retry fenced on the version the delete took loses: the run stays deleted', async () => {
        const { runId, version } = await endedRun('delete-then-retry', 1, 'fail');
        const state = decodeState((await s().load(runId))!);
        expect(await s().deleteRun(runId, version)).toBe(true);
        await expect(s().commit({ runId, expectedVersion: version, state: { ...state, status: 'running', reason: undefined }, ...META })).rejects.toBeInstanceOf(StaleVersionError);
        expect(await s().load(runId)).toBeUndefined();
      });
    });
  });
}
