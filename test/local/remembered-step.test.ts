import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';

/**
 * A worker's load right after its own step commit is that commit's head row, remembered, while nothing
 * was written to the file since (SqliteCheckpointStore.lastStep). Every way the row can change after
 * the commit must be seen: a write by another connection (another process), by this connection through
 * another store, and a cancel asked for while the step ran. The next commit's fence is answered from the
 * same row while nothing was written, and read again when anything was.
 */
const dir = mkdtempSync(join(tmpdir(), 'stepwise-remembered-'));
const path = join(dir, 'store.db');
const runtime = openLocalRuntime({ dbPath: path });
/** Another process's connection to the same file, as the HTTP API or another worker has. */
const other = new Database(path);
other.pragma('busy_timeout = 5000');
const otherStore = new SqliteCheckpointStore(other);
/** This connection through another store object, as the runtime's own API handlers may write. */
const sameConnection = new SqliteCheckpointStore(runtime.db);
/** Who writes to the file between this connection's commit and its next load or commit. */
const WRITERS: [string, () => SqliteCheckpointStore][] = [
  ['another process', () => otherStore],
  ['this connection through another store', () => sameConnection],
];
afterAll(() => { other.close(); runtime.close(); rmSync(dir, { recursive: true, force: true }); });

/** The commit of step `n` of a run, over version n. */
const stepWrite = (runId: string, n: number, workerId = META.workerId) => ({
  runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META, workerId,
});

async function runAt(runId: string, steps: number): Promise<void> {
  await runtime.store.create(newState(runId), META);
  for (let n = 1; n <= steps; n++) await runtime.store.commit(stepWrite(runId, n));
}

describe('SQLite load after this connection\'s own step commit', () => {
  it('is the very checkpoint a read of the file gives', async () => {
    await runAt('same', 3);
    const remembered = await runtime.store.load('same', { afterStep: 3 });
    expect(remembered).toEqual(await otherStore.load('same', { afterStep: 3 }));
    expect(remembered).toMatchObject({ version: 4, status: 'running', steps: [] });
  });

  it.each(WRITERS)('sees a cancel asked for after the commit by %s', async (by, store) => {
    const runId = `cancel-after/${by}`;
    await runAt(runId, 2);
    await store().requestCancel(runId, 3, by);
    expect((await runtime.store.load(runId, { afterStep: 2 }))?.cancelRequested).toBe(by);
  });

  it('sees a cancel asked for while the step ran, which its commit keeps', async () => {
    await runAt('cancel-during', 2);
    await otherStore.requestCancel('cancel-during', 3, 'during');
    await runtime.store.commit(stepWrite('cancel-during', 3));
    expect((await runtime.store.load('cancel-during', { afterStep: 3 }))?.cancelRequested).toBe('during');
  });

  it('sees a decision and restarts another process recorded, and a version it wrote', async () => {
    await runAt('decided', 2);
    await otherStore.recordDecision('decided', 3, { step: 3, tool: 'copy_batch', input: { batch: 3 }, at: 5, idempotencyKey: 'decided/step-3' });
    expect((await runtime.store.load('decided', { afterStep: 2 }))?.pending).toContain('copy_batch');
    await otherStore.addRestarts('decided', 3, 2);
    expect((await runtime.store.load('decided', { afterStep: 2 }))?.restarts).toBe(2);
    await otherStore.commit(stepWrite('decided', 3, 'other'));
    expect(await runtime.store.load('decided', { afterStep: 3 })).toMatchObject({ version: 4, workerId: 'other' });
  });

  it.each(WRITERS)('the next commit reads its fence again after a write by %s: a cancel asked for between two steps is kept, and the load after it sees it', async (by, store) => {
    const runId = `cancel-between/${by}`;
    await runAt(runId, 2);
    await store().requestCancel(runId, 3, by);
    await runtime.store.commit(stepWrite(runId, 3));
    expect((await runtime.store.load(runId, { afterStep: 3 }))?.cancelRequested).toBe(by);
  });

  it('a commit fenced on what it remembers still refuses a version it did not read, and writes nothing', async () => {
    await runAt('remembered-stale', 3);
    await expect(runtime.store.commit(stepWrite('remembered-stale', 3))).rejects.toThrow(/stale/i);
    expect(await otherStore.load('remembered-stale', { afterStep: 3 })).toMatchObject({ version: 4, workerId: META.workerId });
    await runtime.store.commit(stepWrite('remembered-stale', 4));
    expect(await otherStore.load('remembered-stale', { afterStep: 4 })).toMatchObject({ version: 5 });
  });

  it('after a commit refused as stale, loads the winner\'s checkpoint', async () => {
    await runAt('refused', 2);
    await otherStore.commit(stepWrite('refused', 3, 'other'));
    await expect(runtime.store.commit(stepWrite('refused', 3))).rejects.toThrow(/stale/i);
    expect(await runtime.store.load('refused', { afterStep: 3 })).toMatchObject({ version: 4, workerId: 'other' });
  });
});
