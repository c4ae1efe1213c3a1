import Database from 'better-sqlite3';
import { copyFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { blobRef } from '../../lib/core/result.ts';
import { pruneLocal } from '../../lib/local/prune.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { FIXTURE_EPOCH, fixturePath, loadResumeComplete } from '../fixtures/formats/resume.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { stepwiseCli } from '../support/cli.ts';
import { newState, recordFor, META } from '../support/states.ts';
import { completeStep } from '../../lib/core/transitions.ts';

const DAY = 24 * 3600_000;

/** Run r created and `steps` steps committed on it, each a version, at the clock's time. */
async function writeSteps(runtime: ReturnType<typeof openLocalRuntime>, clock: ManualClock, steps: number): Promise<void> {
  let state = newState('r');
  await runtime.store.create(state, META);
  for (let n = 1; n <= steps; n++) {
    state = completeStep(state, recordFor('r', n), clock.now());
    await runtime.store.commit({ runId: 'r', expectedVersion: n, state, appended: state.steps[n - 1]!, ...META });
  }
}

/**
 * Another process on the file that does not wait for the lock: a batch that still held it would refuse its
 * write. `write()` writes once (from a batch's callback); `writes()` counts them.
 */
function otherWriter(path: string): { write(): void; writes(): number; close(): void } {
  const other = new Database(path);
  other.pragma('busy_timeout = 0');
  other.exec('CREATE TABLE other_writes (n INTEGER)');
  return {
    write: () => { other.prepare('INSERT INTO other_writes VALUES (1)').run(); },
    writes: () => (other.prepare('SELECT count(*) AS n FROM other_writes').get() as { n: number }).n,
    close: () => other.close(),
  };
}

describe('retention, SQLite', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('keeps every checkpoint version 14 days by default, then only the latest', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    try {
      await writeSteps(runtime, clock, 3);
      clock.advance(13 * DAY);
      expect(runtime.store.prune()).toBe(0);
      expect((await runtime.store.history('r')).map((h) => h.version)).toEqual([1, 2, 3, 4]);
      clock.advance(2 * DAY);
      expect(runtime.store.prune()).toBe(3);
      expect((await runtime.store.history('r')).map((h) => h.version)).toEqual([4]);
      // The latest checkpoint still holds the whole run.
      expect((await runtime.store.load('r'))?.steps).toHaveLength(3);
    } finally {
      runtime.close();
    }
  });

  it('prunes in batches, each a transaction of its own: another process writes between them', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const other = otherWriter(db.path);
    try {
      await writeSteps(runtime, clock, 25);
      clock.advance(15 * DAY);
      const batches: number[] = [];
      const pruned = runtime.store.prune({
        batch: 10,
        onBatch: (deleted) => {
          batches.push(deleted);
          other.write();
        },
      });
      expect(pruned).toBe(25);
      expect(batches).toEqual([10, 10, 5]);
      expect(other.writes()).toBe(3);
      expect((await runtime.store.history('r')).map((h) => h.version)).toEqual([26]);
      // Every pruned version's record moved to the steps table with it.
      expect((await runtime.store.load('r'))?.steps).toHaveLength(25);
    } finally {
      other.close();
      runtime.close();
    }
  });

  it('sweeps unreferenced blobs in batches after a mark that holds no lock; one put again since the mark is kept', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const other = otherWriter(db.path);
    try {
      const orphans = Array.from({ length: 25 }, (_, n) => Buffer.from(`orphan ${n}`));
      for (const data of orphans) await runtime.blobs.put(blobRef(data), data);
      // The sweep goes in ref order: the last one is in its last batch.
      const last = orphans.sort((a, b) => (blobRef(a) < blobRef(b) ? -1 : 1)).at(-1)!;
      clock.advance(2 * DAY);
      const batches: number[] = [];
      const collected = runtime.blobs.collect(undefined, {
        batch: 10,
        onBatch: (deleted) => {
          batches.push(deleted);
          other.write();
          // A step that writes this output again, after the mark and before its batch: its put renews it.
          if (batches.length === 1) void runtime.blobs.put(blobRef(last), last);
        },
      });
      expect(batches).toEqual([10, 10, 4]);
      expect(collected).toBe(24);
      expect(other.writes()).toBe(3);
      expect(await runtime.blobs.get(blobRef(last))).toEqual(last);
    } finally {
      other.close();
      runtime.close();
    }
  });

  it('never removes what a live run needs: a waiting run older than the window resumes after a prune, and so does every other', async () => {
    db = tempDb();
    copyFileSync(fixturePath(2, 'sqlite.db'), db.path);
    const clock = new ManualClock(FIXTURE_EPOCH + 20 * DAY);
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    try {
      const referenced = (runtime.db.prepare('SELECT ref FROM blobs').all() as { ref: string }[]).map((r) => r.ref);
      expect(referenced).toHaveLength(1);
      // An orphan from a step redone with another output (crash point C5), old enough to collect, and one
      // a step is writing right now, not yet committed: the sweep must leave that one alone.
      const orphan = Buffer.from('o'.repeat(5000));
      runtime.db.prepare('INSERT INTO blobs (ref, bytes, data, created_at) VALUES (?, ?, ?, ?)').run(blobRef(orphan), orphan.length, orphan, FIXTURE_EPOCH);
      const fresh = Buffer.from('f'.repeat(5000));
      await runtime.blobs.put(blobRef(fresh), fresh);
      const stepsBefore = runtime.db.prepare('SELECT * FROM steps ORDER BY 1, 2').all();

      const pruned = pruneLocal(runtime);
      expect(pruned.blobs).toBe(1);
      expect(pruned.checkpoints).toBeGreaterThan(0);
      expect(await runtime.blobs.get(blobRef(orphan))).toBeUndefined();
      expect(await runtime.blobs.get(blobRef(fresh))).toEqual(fresh);
      expect(await runtime.blobs.get(referenced[0]!)).toBeDefined();
      // Step records and recorded decisions are the run: never pruned.
      expect(runtime.db.prepare('SELECT * FROM steps ORDER BY 1, 2').all()).toEqual(stepsBefore);
      for (const run of ['running-1', 'pending-1', 'retrying-1', 'waiting-1', 'completed-1']) {
        const history = await runtime.store.history(run);
        expect(history).toHaveLength(1);
        expect(history[0]!.version).toBe((await runtime.store.load(run))!.version);
      }
    } finally {
      runtime.close();
    }
    // The history now starts at the latest version, so resume from a reopened file.
    const again = openLocalRuntime({ dbPath: db.path, clock });
    try {
      const after = await loadResumeComplete(2, again, clock, { historyPruned: true });
      expect(after['waiting-1']).toMatchObject({ status: 'completed', step: 3 });
    } finally {
      again.close();
    }
  });

  it('stepwise prune prunes by the window or by --older-than-days, and says what it removed', async () => {
    db = tempDb();
    copyFileSync(fixturePath(2, 'sqlite.db'), db.path);
    // The fixture is from 2025-01-01: by today's clock, everything but the latest versions is past 14 days.
    const r = await stepwiseCli(['prune', '--older-than-days', '30'], { STEPWISE_DB: db.path });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^pruned \d+ checkpoint versions older than 30 days \(the latest of every run kept\), 0 queue tombstones, 0 expired events, 0 unreferenced blobs$/m);
    const again = await stepwiseCli(['prune'], { STEPWISE_DB: db.path });
    expect(again.out).toMatch(/^pruned 0 checkpoint versions past their retention window \(the latest of every run kept; each keeps the window it was written with/m);
    const bad = await stepwiseCli(['prune', '--older-than-days', 'soon'], { STEPWISE_DB: db.path });
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--older-than-days/);
  });

  it('a lowered STEPWISE_RETENTION_DAYS is not said to apply to versions written under the window before it', async () => {
    db = tempDb();
    // Three versions written three days ago, under the default 14 days.
    const clock = new ManualClock(Date.now() - 3 * DAY);
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    try {
      await writeSteps(runtime, clock, 2);
    } finally {
      runtime.close();
    }
    const r = await stepwiseCli(['prune'], { STEPWISE_DB: db.path, STEPWISE_RETENTION_DAYS: '1' });
    expect(r.code).toBe(0);
    // They keep their 14 days: the line must not claim a window of 1 day was applied, and says what does prune by age.
    expect(r.out).not.toContain('1 days');
    expect(r.out).toMatch(/^pruned 0 checkpoint versions past their retention window .*--older-than-days n prunes by age\)/m);
    const byAge = await stepwiseCli(['prune', '--older-than-days', '1'], { STEPWISE_DB: db.path });
    expect(byAge.out).toMatch(/^pruned 2 checkpoint versions older than 1 days/m);
  });
});
