import { afterEach, describe, expect, it } from 'vitest';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { META, recordFor, stateAfter } from '../support/states.ts';

const blobCount = (db: import('../../lib/local/database.ts').Db): number => (db.prepare('SELECT count(*) AS n FROM blobs').get() as { n: number }).n;

/**
 * The local runtime keeps the blobs in the checkpoints' file, so a step's large output is written by the
 * step's checkpoint transaction: both or neither, one write.
 */
describe('local step with a large output: its blob written by the checkpoint\'s transaction', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('a crash after the tool ran (C5) leaves no blob; the step run again writes it with its record', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const agent = rowsAgent(rows, { largeOutputAt: [2] });
    const a = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(3)), clock, workerId: 'A', crashAt: { point: 'C5', step: 2 } });
    await start(a.deps);
    expect(await drain(a.deps, a.runtime, clock).catch((e: unknown) => e)).toBeInstanceOf(SimulatedCrash);
    // Before, a put of its own left the blob behind (an orphan for the sweep): now nothing is written.
    expect(blobCount(a.runtime.db)).toBe(0);
    expect((await loadState(a.runtime)).step).toBe(1);
    a.runtime.close();

    const b = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(3)), clock, workerId: 'B' });
    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state.status).toBe('completed');
    const ref = state.steps[1]!.result.ref!;
    expect(ref).toMatch(/^sha256:/);
    expect(blobCount(b.runtime.db)).toBe(1);
    expect((await b.runtime.blobs.get(ref))?.toString()).toContain('x'.repeat(10_000));
    b.runtime.close();
  });

  it('a commit whose fence fails writes no blob either', async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    await start(w.deps);
    const blob = { ref: 'sha256:stale', data: Buffer.from('y'.repeat(20_000)) };
    // Version 5 is not the run's latest (1): stale, and the blob goes with the rolled-back transaction.
    await expect(w.runtime.store.commit({ runId: 'run', expectedVersion: 5, state: stateAfter('run', 1), appended: recordFor('run', 1), blobs: [blob], ...META }))
      .rejects.toThrow(/version/i);
    expect(blobCount(w.runtime.db)).toBe(0);
    await w.runtime.store.commit({ runId: 'run', expectedVersion: 1, state: stateAfter('run', 1), appended: recordFor('run', 1), blobs: [blob], ...META });
    expect((await w.runtime.blobs.get('sha256:stale'))?.equals(blob.data)).toBe(true);
    w.runtime.close();
  });

  it('a store not opened with the blobs refuses them rather than dropping them', async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    await start(w.deps);
    const alone = new SqliteCheckpointStore(w.runtime.db);
    expect(alone.carriesBlobs).toBe(false);
    await expect(alone.commit({ runId: 'run', expectedVersion: 1, state: stateAfter('run', 1), appended: recordFor('run', 1), blobs: [{ ref: 'sha256:x', data: Buffer.from('x') }], ...META }))
      .rejects.toThrow(/cannot carry them/);
    expect(blobCount(w.runtime.db)).toBe(0);
    w.runtime.close();
  });
});
