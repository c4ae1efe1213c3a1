import Database from 'better-sqlite3';
import { copyFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { blobRef } from '../../lib/core/result.ts';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { fixturePath, FIXTURE_EPOCH } from '../fixtures/formats/resume.ts';
import { emptiedWal, framesByTree } from '../../bench/wal-support.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { keyCheckpointsAsBefore, keyStepsAsBefore } from '../support/old-files.ts';
import { pruneCheckpointRow } from '../support/local-records.ts';
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

  it("appends the newest run's step at the end of the checkpoints b-tree: about one WAL page a step, where keyed (run_id, version) it took two", async () => {
    db = tempDb();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('older'), META);
    await runtime.store.create(newState('r'), META);
    emptiedWal(runtime.db);
    for (let n = 1; n <= 300; n++) await runtime.store.commit({ runId: 'r', expectedVersion: n, state: stateAfter('r', n), appended: recordFor('r', n), ...META });
    // Page counts do not depend on timing: the last leaf a step, its parent when a new leaf begins (every
    // 9 rows here). The WITHOUT ROWID table of older files wrote 2.07 a step for the same rows.
    const frames = framesByTree(runtime.db, db.path, 300);
    expect(frames.get('checkpoints')).toBeLessThan(1.3);
    expect([...frames.keys()].filter((tree) => tree !== 'checkpoints' && tree !== 'file header (page 1)')).toEqual([]);
    // Each key is its run's number and its version, so a run's rows are one range, in version order.
    const keys = runtime.db.prepare('SELECT c.run_id, c.version, c.id >> 32 AS number, c.id & 4294967295 AS low, r.run_no FROM checkpoints c JOIN runs r USING (run_id) ORDER BY c.id').all() as
      { run_id: string; version: number; number: number; low: number; run_no: number }[];
    expect(keys.map((k) => k.run_id)).toEqual(['older', ...Array(301).fill('r')]);
    for (const k of keys) expect([k.number, k.low]).toEqual([k.run_no, k.version]);
    expect(keys.filter((k) => k.run_id === 'r').map((k) => k.version)).toEqual(Array.from({ length: 301 }, (_, i) => i + 1));
  });

  it('re-keys the checkpoints of a file keyed (run_id, version) on open: every row kept, each run numbered, the runs go on and new runs take the next numbers', async () => {
    db = tempDb();
    const clock = new ManualClock();
    runtime = openLocalRuntime({ dbPath: db.path, clock });
    for (const [runId, steps] of [['a', 3], ['b', 1], ['c', 0]] as const) {
      await runtime.store.create(newState(runId), META);
      for (let n = 1; n <= steps; n++) await runtime.store.commit({ runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
    }
    const snapshot = (r: LocalRuntime | Database.Database) => ('db' in r ? r.db : r).prepare('SELECT run_id, version, step, status, record, head, worker_id, created_at, expires_at FROM checkpoints ORDER BY run_id, version').all();
    const before = snapshot(runtime);
    runtime.close();
    keyCheckpointsAsBefore(db.path);
    const old = new Database(db.path);
    expect(old.prepare("SELECT count(*) AS n FROM pragma_table_info('checkpoints') WHERE name = 'id'").get()).toEqual({ n: 0 });
    expect(snapshot(old)).toEqual(before);
    old.close();

    runtime = openLocalRuntime({ dbPath: db.path, clock });
    expect(snapshot(runtime)).toEqual(before);
    const numbers = runtime.db.prepare('SELECT run_id, run_no FROM runs ORDER BY run_id').all() as { run_id: string; run_no: number }[];
    expect(new Set(numbers.map((n) => n.run_no)).size).toBe(3);
    const misplaced = runtime.db.prepare('SELECT count(*) AS n FROM checkpoints c JOIN runs r USING (run_id) WHERE c.id <> r.run_no * 4294967296 + c.version').get();
    expect(misplaced).toEqual({ n: 0 });
    expect((await runtime.store.history('a')).map((h) => h.version)).toEqual([1, 2, 3, 4]);
    expect(decodeState((await runtime.store.load('a'))!)).toEqual(stateAfter('a', 3));
    // A stale writer is still refused, and the run goes on from its newest row.
    await expect(runtime.store.commit({ runId: 'a', expectedVersion: 3, state: stateAfter('a', 3), appended: recordFor('a', 3), ...META })).rejects.toBeInstanceOf(StaleVersionError);
    await runtime.store.commit({ runId: 'a', expectedVersion: 4, state: stateAfter('a', 4), appended: recordFor('a', 4), ...META });
    expect(decodeState((await runtime.store.load('a'))!)).toEqual(stateAfter('a', 4));
    await runtime.store.create(newState('d'), META);
    const d = runtime.db.prepare("SELECT run_no FROM runs WHERE run_id = 'd'").get() as { run_no: number };
    expect(d.run_no).toBe(Math.max(...numbers.map((n) => n.run_no)) + 1);
    expect((await runtime.store.list({ status: 'running' })).map((s) => [s.runId, s.version]).sort()).toEqual([['a', 5], ['b', 2], ['c', 1], ['d', 1]]);
  });

  it('re-keys the steps of a layout 1 file on open: decisions and moved records kept, the pending decision found, the run goes on', async () => {
    db = tempDb();
    const clock = new ManualClock();
    runtime = openLocalRuntime({ dbPath: db.path, clock });
    await runtime.store.create(newState('older'), META);
    await runtime.store.create(newState('a'), META);
    for (let n = 1; n <= 3; n++) await runtime.store.commit({ runId: 'a', expectedVersion: n, state: stateAfter('a', n), appended: recordFor('a', n), ...META });
    await runtime.store.recordDecision('a', 4, decisionFor('a', 4));
    // Versions 2 and 3 pruned: the records of steps 1 and 2 are in the steps table.
    pruneCheckpointRow(runtime.db, 'a', 2);
    pruneCheckpointRow(runtime.db, 'a', 3);
    const loaded = (await runtime.store.load('a'))!;
    const steps = (r: LocalRuntime | Database.Database) => ('db' in r ? r.db : r).prepare('SELECT run_id, step, decision, record FROM steps ORDER BY run_id, step').all();
    const before = steps(runtime);
    expect(before).toHaveLength(3);
    runtime.close();
    keyStepsAsBefore(db.path);
    const old = new Database(db.path);
    expect(old.prepare("SELECT count(*) AS n FROM pragma_table_info('steps') WHERE name = 'id'").get()).toEqual({ n: 0 });
    old.close();

    runtime = openLocalRuntime({ dbPath: db.path, clock });
    expect(runtime.db.pragma('user_version', { simple: true })).toBe(2);
    expect(steps(runtime)).toEqual(before);
    const misplaced = runtime.db.prepare('SELECT count(*) AS n FROM steps s JOIN runs r USING (run_id) WHERE s.id <> r.run_no * 4294967296 + s.step').get();
    expect(misplaced).toEqual({ n: 0 });
    const again = (await runtime.store.load('a'))!;
    expect(again).toEqual(loaded);
    expect(again.pending).toBeDefined();
    expect(decodeState(again).steps.map((s) => s.step)).toEqual([1, 2, 3]);
    // A decision for a step that has one is still refused, and the run goes on.
    await expect(runtime.store.recordDecision('a', 4, decisionFor('a', 4))).rejects.toBeInstanceOf(StaleVersionError);
    await runtime.store.commit({ runId: 'a', expectedVersion: 4, state: stateAfter('a', 4), appended: recordFor('a', 4), ...META });
    expect(decodeState((await runtime.store.load('a'))!).steps.map((s) => s.step)).toEqual([1, 2, 3, 4]);
  });

  it('prunes versions of 1 KB records without growing the file: each moved record stays on its leaf, where keyed (run_id, step) it took an overflow page', async () => {
    db = tempDb();
    const clock = new ManualClock();
    runtime = openLocalRuntime({ dbPath: db.path, clock, retentionMs: 1000 });
    await runtime.store.create(newState('r'), META);
    const big = (n: number) => ({ ...recordFor('r', n), input: { pad: 'x'.repeat(1100) } });
    for (let n = 1; n <= 300; n++) await runtime.store.commit({ runId: 'r', expectedVersion: n, state: stateAfter('r', n), appended: big(n), ...META });
    const used = () => (runtime.db.pragma('page_count', { simple: true }) as number) - (runtime.db.pragma('freelist_count', { simple: true }) as number);
    const before = used();
    clock.advance(2000);
    expect(runtime.store.prune()).toBe(300);
    // Keyed (run_id, step) WITHOUT ROWID, the 300 records took 300 overflow pages more than they freed.
    expect(used()).toBeLessThanOrEqual(before);
    expect(decodeState((await runtime.store.load('r'))!).steps).toHaveLength(300);
  });

  it('refuses to open a layout 1 file holding a step row of no run, and loses none of its rows', async () => {
    db = tempDb();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('a'), META);
    await runtime.store.recordDecision('a', 1, decisionFor('a', 1));
    runtime.close();
    keyStepsAsBefore(db.path);
    const old = new Database(db.path);
    old.prepare("INSERT INTO steps SELECT 'ghost', step, decision, record FROM steps WHERE run_id = 'a'").run();
    old.close();
    expect(() => openLocalRuntime({ dbPath: db.path })).toThrow(/1 step rows of runs this file has no runs row for/);
    const after = new Database(db.path);
    expect(after.prepare('SELECT run_id, step FROM steps ORDER BY run_id').all()).toEqual([{ run_id: 'a', step: 1 }, { run_id: 'ghost', step: 1 }]);
    after.close();
  });

  it('refuses to open an older file holding a checkpoint row of no run, and loses none of its rows', async () => {
    db = tempDb();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('a'), META);
    runtime.close();
    keyCheckpointsAsBefore(db.path);
    const old = new Database(db.path);
    old.prepare("INSERT INTO checkpoints SELECT 'ghost', version, step, status, tool, idempotency_key, worker_id, code_version, bytes, record, head, reason, created_at, expires_at FROM checkpoints WHERE run_id = 'a'").run();
    old.close();
    expect(() => openLocalRuntime({ dbPath: db.path })).toThrow(/1 checkpoint rows of runs this file has no runs row for/);
    const after = new Database(db.path);
    expect(after.prepare('SELECT run_id, version FROM checkpoints ORDER BY run_id').all()).toEqual([{ run_id: 'a', version: 1 }, { run_id: 'ghost', version: 1 }]);
    after.close();
  });

  it("refuses a checkpoint row that names no run number, as older code sharing the file would write it, and one whose key is not its run's number and version", async () => {
    db = tempDb();
    runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('a'), META);
    await runtime.store.create(newState('b'), META);
    const columns = 'run_id, version, step, status, worker_id, code_version, bytes, head, created_at, expires_at';
    // The previous release's insert: without a key, SQLite would give it the next rowid, in run b's range.
    expect(() => runtime.db.prepare(`INSERT INTO checkpoints (${columns}) VALUES ('a', 2, 1, 'running', 'w', 'old', 0, '{}', 0, 0)`).run())
      .toThrow(/NOT NULL constraint failed: checkpoints.run_no/);
    const b = runtime.db.prepare("SELECT run_no FROM runs WHERE run_id = 'b'").get() as { run_no: number };
    expect(() => runtime.db.prepare(`INSERT INTO checkpoints (id, run_no, ${columns}) VALUES (? * 4294967296 + 2, ?, 'a', 3, 1, 'running', 'w', 'old', 0, '{}', 0, 0)`).run(b.run_no, b.run_no))
      .toThrow(/CHECK constraint failed/);
    expect((await runtime.store.history('a')).map((h) => h.version)).toEqual([1]);
    expect((await runtime.store.history('b')).map((h) => h.version)).toEqual([1]);
  });
});
