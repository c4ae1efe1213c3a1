import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import type { Handled } from '../../lib/engine/handle-message.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { startRun } from '../../lib/engine/start.ts';
import { describeFullDiskStep, describeLocalRefusal } from '../../lib/local/disk-full.ts';
import { openLocalEngine } from '../../lib/local.ts';
import { pruneAtStart } from '../../lib/local/prune.ts';
import { createLogger } from '../../lib/log.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/** A real SQLITE_FULL, from a scratch file capped at the pages it has (SQLite's own words and code). */
function fullDiskError(path: string): Error {
  const full = new Database(path);
  try {
    full.exec('CREATE TABLE t (x TEXT)');
    full.pragma(`max_page_count = ${full.pragma('page_count', { simple: true }) as number}`);
    full.prepare('INSERT INTO t VALUES (?)').run('x'.repeat(100_000));
  } catch (error) {
    return error as Error;
  } finally {
    full.close();
  }
  throw new Error('no SQLITE_FULL');
}

const jsonLines = (lines: string[]) => lines.map((line) => JSON.parse(line) as Record<string, unknown>);

/**
 * The disk that holds the SQLite file fills up under a local worker. Freed again, every run must go on
 * from its last checkpoint, no step lost and no effect applied twice; while it is full, the worker's lines
 * must say what is wrong and what to do. Its receive, a write (the message's lease), threw SQLITE_FULL out
 * of the worker loop: the worker stopped (exit 1) some 30 s after its step was refused (the message's
 * visibility timeout), and its runs waited for someone to start it again.
 */
describe('a local worker on a disk that fills up', () => {
  const dbs: ReturnType<typeof tempDb>[] = [];
  const opened: { close(): void }[] = [];
  afterEach(() => {
    for (const c of opened.splice(0)) c.close();
    for (const d of dbs.splice(0)) d.cleanup();
  });
  const completed = (h: Handled) => h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status === 'completed';

  it('whose receive the full disk refuses takes nothing, says so once with what to do, and works on once space is freed', async () => {
    const db = tempDb();
    const scratch = tempDb();
    dbs.push(db, scratch);
    const full = fullDiskError(scratch.path);
    expect((full as { code?: string }).code).toBe('SQLITE_FULL');
    const rows = new FakeRows();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(2)), clock: new ManualClock(), workerId: 'A' });
    opened.push(w.runtime);
    await start(w.deps, 'write 2 rows', 'r');
    // The receive's write (the message's lease) refused three times, as a full disk refuses it.
    const consumer = w.runtime.queue;
    const take = (consumer as unknown as { take: (...args: unknown[]) => unknown }).take.bind(consumer);
    let refusals = 3;
    (consumer as unknown as { take: (...args: unknown[]) => unknown }).take = (...args: unknown[]) => {
      if (refusals > 0) {
        refusals--;
        throw full;
      }
      return take(...args);
    };
    const lines: string[] = [];
    const log = createLogger({}, { format: 'json', write: (line) => lines.push(line) });
    await runWorker({ ...w.deps, log }, consumer, {
      visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0, refusal: describeLocalRefusal, receiveRefusal: describeFullDiskStep, onHandled: completed,
    });
    expect(refusals).toBe(0);
    const refused = jsonLines(lines).filter((l) => l.event === 'receive-refused');
    expect(refused).toEqual([expect.objectContaining({ level: 'error', refused: 'disk-full', error: 'database or disk is full' })]);
    expect(refused[0]!.msg).toBe('no message could be received: the disk that holds the database is full, so nothing was written: free space on it, and each run goes on from its last checkpoint; the worker polls again until this is mended');
    expect((await loadState(w.runtime, 'r')).status).toBe('completed');
    expect(rows.applied).toEqual(['r/step-1', 'r/step-2']);
  });

  it('whose receive fails otherwise still stops, as before', async () => {
    const db = tempDb();
    dbs.push(db);
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    opened.push(w.runtime);
    await start(w.deps, 'write 1 row', 'r');
    w.runtime.queue.receive = async () => { throw new Error('boom'); };
    await expect(runWorker(w.deps, w.runtime.queue, { visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0, receiveRefusal: describeFullDiskStep })).rejects.toThrow('boom');
  });

  it("says of a step whose checkpoint the full disk refused that the disk is full and what to do, in `stepwise run` too, and the run goes on once it is freed", async () => {
    const db = tempDb();
    const scratch = tempDb();
    dbs.push(db, scratch);
    const full = fullDiskError(scratch.path);
    const rows = new FakeRows();
    let engine: Awaited<ReturnType<typeof openLocalEngine>> | undefined;
    // After step 1's effect, its checkpoint is refused as a full disk refuses it; the next commit goes through.
    const agent = rowsAgent(rows, {
      afterWrite: (step) => {
        if (step !== 1 || rows.timesReceived('r/step-1') > 1) return;
        const store = engine!.runtime.store;
        const commit = store.commit.bind(store);
        store.commit = async () => {
          store.commit = commit;
          throw full;
        };
      },
    });
    const lines: string[] = [];
    const log = createLogger({}, { format: 'json', write: (line) => lines.push(line) });
    engine = await openLocalEngine(agent, { dbPath: db.path, model: new StubModel(writeRowsScript(2)), log });
    opened.push(engine);
    await startRun(engine.deps, { goal: 'write 2 rows', runId: 'r' });
    expect((await engine.work('r')).state.status).toBe('completed');
    const errors = jsonLines(lines).filter((l) => l.event === 'step-error');
    expect(errors).toEqual([expect.objectContaining({ runId: 'r', refused: 'disk-full', error: 'database or disk is full' })]);
    expect(errors[0]!.msg).toBe('step did not finish: the disk that holds the database is full, so nothing was written: free space on it, and each run goes on from its last checkpoint; the message is delivered again until this is mended');
    // The refused try's effect was applied under its key; the next try found the key and wrote nothing more.
    expect(rows.applied).toEqual(['r/step-1', 'r/step-2']);
    expect(rows.timesReceived('r/step-1')).toBe(2);
    expect(describeFullDiskStep(new Error('boom'))).toBeUndefined();
  });

  it('starting on a full disk skips its start-up pruning with a warning, where it stopped before its first step (exit 1)', async () => {
    const db = tempDb();
    const scratch = tempDb();
    dbs.push(db, scratch);
    const full = fullDiskError(scratch.path);
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    opened.push(w.runtime);
    w.runtime.store.prune = () => { throw full; };
    const lines: string[] = [];
    pruneAtStart(w.runtime, createLogger({}, { format: 'json', write: (line) => lines.push(line) }));
    expect(jsonLines(lines)).toEqual([expect.objectContaining({ event: 'prune-skipped', level: 'warn' })]);
    expect(jsonLines(lines)[0]!.msg).toMatch(/^the disk that holds the database is full: /);
  });
});
