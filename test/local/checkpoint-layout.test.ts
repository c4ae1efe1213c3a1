import { copyFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { blobRef } from '../../lib/core/result.ts';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { fixturePath, FIXTURE_EPOCH } from '../fixtures/formats/resume.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { decisionFor, META, newState, recordFor, stateAfter } from '../support/states.ts';

const rows = (runtime: LocalRuntime, table: string, runId: string) => runtime.db.prepare(`SELECT * FROM ${table} WHERE run_id = ? ORDER BY 2`).all(runId);

describe('the SQLite checkpoint layout', () => {
  let db: ReturnType<typeof tempDb>;
  let runtime: LocalRuntime;
  afterEach(() => { runtime?.close(); db?.cleanup(); });

  it("writes a running run's next step as one checkpoint row carrying its record: the runs row and the steps table stay as they are", async () => {
    db = tempDb();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('r'), META);
    await runtime.store.commit({ runId: 'r', expectedVersion: 1, state: stateAfter('r', 1), appended: recordFor('r', 1), ...META });
    const runsBefore = rows(runtime, 'runs', 'r');
    for (let n = 2; n <= 4; n++) await runtime.store.commit({ runId: 'r', expectedVersion: n, state: stateAfter('r', n), appended: recordFor('r', n), ...META });

    expect(rows(runtime, 'runs', 'r')).toEqual(runsBefore);
    expect(rows(runtime, 'steps', 'r')).toEqual([]);
    const records = runtime.db.prepare('SELECT version, step, record FROM checkpoints WHERE run_id = ? ORDER BY version').all('r') as { version: number; step: number; record: string | null }[];
    expect(records.map((r) => [r.version, r.step, r.record === null ? null : JSON.parse(r.record).step])).toEqual([[1, 0, null], [2, 1, 1], [3, 2, 2], [4, 3, 3], [5, 4, 4]]);
    // What every reader sees is the newest row, not the runs row's version and step.
    const loaded = (await runtime.store.load('r'))!;
    expect(loaded.version).toBe(5);
    expect(decodeState(loaded)).toEqual(stateAfter('r', 4));
    expect((await runtime.store.list({ status: 'running' })).find((s) => s.runId === 'r')).toMatchObject({ version: 5, step: 4 });
    expect((await runtime.store.list()).find((s) => s.runId === 'r')).toMatchObject({ version: 5, step: 4 });
  });

  it('refuses a stale writer when the versions after the one it read are pruned but the newest: the fence is the newest row, not a free key', async () => {
    db = tempDb();
    const clock = new ManualClock();
    runtime = openLocalRuntime({ dbPath: db.path, clock, retentionMs: 1_000 });
    await runtime.store.create(newState('r'), META);
    for (let n = 1; n <= 4; n++) {
      // Steps 2 and 3 side-effecting: their decisions are steps rows before their records are written.
      if (n === 2 || n === 3) await runtime.store.recordDecision('r', n, decisionFor('r', n));
      await runtime.store.commit({ runId: 'r', expectedVersion: n, state: stateAfter('r', n), appended: recordFor('r', n), ...META });
    }
    clock.advance(2_000);
    expect(runtime.store.prune()).toBe(4);
    expect((await runtime.store.history('r')).map((h) => h.version)).toEqual([5]);
    // Version 3 is free now: a writer that read version 2 must still be refused, by every fenced write.
    await expect(runtime.store.commit({ runId: 'r', expectedVersion: 2, state: stateAfter('r', 3), appended: recordFor('r', 3), ...META })).rejects.toBeInstanceOf(StaleVersionError);
    await expect(runtime.store.addRestarts('r', 2, 1)).rejects.toBeInstanceOf(StaleVersionError);
    await expect(runtime.store.requestCancel('r', 2, 'ops')).rejects.toBeInstanceOf(StaleVersionError);
    await expect(runtime.store.recordDecision('r', 2, decisionFor('r', 3))).rejects.toBeInstanceOf(StaleVersionError);
    await expect(runtime.store.markUnreadable('r', 2, 'unreadable', META)).rejects.toBeInstanceOf(StaleVersionError);
    expect((await runtime.store.history('r')).map((h) => h.version)).toEqual([5]);
    // The pruned rows' records moved to the steps table (step 4's is in the newest row): the run is whole.
    expect((rows(runtime, 'steps', 'r') as { step: number }[]).map((s) => s.step)).toEqual([1, 2, 3]);
    expect(decodeState((await runtime.store.load('r'))!)).toEqual(stateAfter('r', 4));
    const next = completeStep(stateAfter('r', 4), recordFor('r', 5), 3_005);
    await runtime.store.commit({ runId: 'r', expectedVersion: 5, state: next, appended: recordFor('r', 5), ...META });
    expect(decodeState((await runtime.store.load('r'))!)).toEqual(next);
    // A bounded load reads from the newest row back, and the steps table, to the step it holds.
    const tail = (await runtime.store.load('r', { afterStep: 3 }))!;
    expect(tail.steps.map((s) => JSON.parse(s).step)).toEqual([4, 5]);
  });

  it("keeps a blob a step record refers to from its checkpoint row, and collects one nothing refers to", async () => {
    db = tempDb();
    const clock = new ManualClock();
    runtime = openLocalRuntime({ dbPath: db.path, clock });
    const kept = Buffer.from('k'.repeat(5000));
    const orphan = Buffer.from('o'.repeat(5000));
    await runtime.blobs.put(blobRef(kept), kept);
    await runtime.blobs.put(blobRef(orphan), orphan);
    await runtime.store.create(newState('r'), META);
    const base = recordFor('r', 1);
    const record = { ...base, result: { ...base.result, bytes: kept.length, ref: blobRef(kept) } };
    await runtime.store.commit({ runId: 'r', expectedVersion: 1, state: completeStep(newState('r'), record, 3_001), appended: record, ...META });
    expect(rows(runtime, 'steps', 'r')).toEqual([]);
    clock.advance(30 * 24 * 3600_000);
    expect(runtime.blobs.collect()).toBe(1);
    expect(await runtime.blobs.get(blobRef(kept))).toEqual(kept);
    expect(await runtime.blobs.get(blobRef(orphan))).toBeUndefined();
  });

  it('counts restarts at the version they were counted at: a step past it reads none, without writing the runs row', async () => {
    db = tempDb();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('r'), META);
    await runtime.store.commit({ runId: 'r', expectedVersion: 1, state: stateAfter('r', 1), appended: recordFor('r', 1), ...META });
    expect(await runtime.store.addRestarts('r', 2, 1)).toBe(1);
    expect(await runtime.store.addRestarts('r', 2, 1)).toBe(2);
    expect((await runtime.store.load('r'))!.restarts).toBe(2);
    const runsBefore = rows(runtime, 'runs', 'r');
    await runtime.store.commit({ runId: 'r', expectedVersion: 2, state: stateAfter('r', 2), appended: recordFor('r', 2), ...META });
    expect(rows(runtime, 'runs', 'r')).toEqual(runsBefore);
    expect((await runtime.store.load('r'))!.restarts).toBeUndefined();
    // Counted again at the new version, from 0.
    expect(await runtime.store.addRestarts('r', 3, 1)).toBe(1);
  });

  it('opens a file of the previous layout: its runs keep their restarts, their records in the steps table, and go on with records in checkpoint rows', async () => {
    db = tempDb();
    copyFileSync(fixturePath(3, 'sqlite.db'), db.path);
    // Counted by older code, which reset the count at each commit: it counts for runs.version.
    const old = new (await import('better-sqlite3')).default(db.path);
    old.prepare("UPDATE runs SET restarts = 2 WHERE run_id = 'running-1'").run();
    expect(old.prepare("SELECT count(*) AS n FROM pragma_table_info('checkpoints') WHERE name = 'record'").get()).toEqual({ n: 0 });
    old.close();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock(FIXTURE_EPOCH + 60_000) });
    const stored = (await runtime.store.load('running-1'))!;
    expect(stored.restarts).toBe(2);
    const state = decodeState(stored);
    expect(state).toMatchObject({ step: 2, steps: [{ step: 1 }, { step: 2 }] });
    const record = { ...recordFor('running-1', 3), tool: state.steps[0]!.tool };
    const next = completeStep(state, record, FIXTURE_EPOCH + 60_000);
    await runtime.store.commit({ runId: 'running-1', expectedVersion: stored.version, state: next, appended: record, ...META });
    const again = (await runtime.store.load('running-1'))!;
    expect(again.restarts).toBeUndefined();
    expect(again.steps.map((s) => JSON.parse(s).step)).toEqual([1, 2, 3]);
    expect(decodeState(again)).toEqual(next);
    expect(runtime.db.prepare("SELECT step FROM steps WHERE run_id = 'running-1' AND record IS NOT NULL ORDER BY step").all()).toEqual([{ step: 1 }, { step: 2 }]);
  });
});
