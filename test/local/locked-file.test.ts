import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import type { Handled } from '../../lib/engine/handle-message.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { startRun } from '../../lib/engine/start.ts';
import { openDatabase } from '../../lib/local/database.ts';
import { openLocalEngine } from '../../lib/local.ts';
import { SqliteQueue } from '../../lib/local/sqlite-queue.ts';
import { describeLockedStep } from '../../lib/local/busy.ts';
import { pruneAtStart } from '../../lib/local/prune.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { createLogger, silentLogger } from '../../lib/log.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * Another connection (an operator's sqlite3 shell in a transaction, a process frozen inside its commit) holds the file's write lock for longer than a worker's busy timeout (10 s; 20 ms here). The
 * worker must wait it out and go on, where its receive, or its release after the step the lock failed,
 * threw out of the loop and stopped it ("stepwise: database is locked", exit 1).
 */
describe('a worker on a file another connection holds locked past the busy timeout', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: { close(): void }[] = [];
  afterEach(() => {
    for (const c of opened.splice(0)) c.close();
    db?.cleanup();
  });

  const setUp = async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(2)), clock, workerId: 'A' });
    opened.push(w.runtime);
    await start(w.deps, 'write 2 rows', 'r');
    // The worker's queue on a connection of its own that gives up on a lock after 20 ms.
    const conn = openDatabase(db.path, 'process');
    conn.pragma('busy_timeout = 20');
    const other = new Database(db.path);
    opened.push(conn, { close: () => { if (other.inTransaction) other.exec('ROLLBACK'); other.close(); } });
    return { clock, rows, w, consumer: new SqliteQueue(conn, { clock }), other };
  };
  const completed = (h: Handled) => h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status === 'completed';

  it('an idle worker whose message turns visible while the file is locked takes it once the lock is let go', async () => {
    const { rows, w, consumer, other } = await setUp();
    other.exec('BEGIN IMMEDIATE');
    const receive = consumer.receive.bind(consumer);
    const received: number[] = [];
    consumer.receive = async (options) => {
      const got = await receive(options);
      received.push(got.length);
      if (received.length === 3) other.exec('COMMIT');
      return got;
    };
    await runWorker(w.deps, consumer, { visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0, onHandled: completed });
    // Three polls found the file locked and took nothing; the fourth took the run's message.
    expect(received.slice(0, 4)).toEqual([0, 0, 0, 1]);
    expect((await loadState(w.runtime, 'r')).status).toBe('completed');
    expect(rows.received).toEqual(['r/step-1', 'r/step-2']);
  });

  /**
   * A worker whose first step's tool has another connection take the write lock (its busy timeout 20 ms),
   * and whose consumer, finding nothing while the lock is held, lets it go and the refused step's
   * visibility timeout pass.
   */
  async function lockedDuringStep1() {
    const { clock, rows, w, consumer, other } = await setUp();
    w.runtime.db.pragma('busy_timeout = 20');
    let locked = false;
    const agent = rowsAgent(rows, { afterWrite: () => { if (!locked) { locked = true; other.exec('BEGIN IMMEDIATE'); } } });
    const receive = consumer.receive.bind(consumer);
    consumer.receive = async (options) => {
      const got = await receive(options);
      if (!got.length && other.inTransaction) {
        other.exec('COMMIT');
        clock.advance(VISIBILITY_MS + 1);
      }
      return got;
    };
    return { rows, w, consumer, agent };
  }

  it('a step the lock refused, whose release it refuses too, comes back after its visibility timeout, and the worker goes on', async () => {
    // The step's commit and the release after it both give up on the lock, taken during the step's tool.
    const { rows, w, consumer, agent } = await lockedDuringStep1();
    const outcomes: string[] = [];
    await runWorker({ ...w.deps, agent }, consumer, {
      visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0,
      onHandled: (h) => { outcomes.push(h.action); return completed(h); },
    });
    expect(outcomes[0]).toBe('release');
    expect((await loadState(w.runtime, 'r')).status).toBe('completed');
    // The refused try wrote its row; the retry found its key and wrote nothing more.
    expect([...rows.rows.keys()]).toEqual(['r/step-1', 'r/step-2']);
  });

  it("says of a step the lock refused who may hold the lock, as the CLI's worker reads it, where the line said only \"database is locked\"", async () => {
    const { w, consumer, agent } = await lockedDuringStep1();
    const lines: string[] = [];
    const log = createLogger({}, { format: 'json', write: (line) => lines.push(line) });
    await runWorker({ ...w.deps, agent, log }, consumer, { visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0, refusal: describeLockedStep, onHandled: completed });
    const errors = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => l.event === 'step-error');
    expect(errors).toEqual([expect.objectContaining({ runId: 'r', refused: 'database-locked', error: 'database is locked' })]);
    expect(errors[0]!.msg).toMatch(/^step did not finish: another process held the write lock on the database for over 10 s \(a stepwise command or worker stopped with Ctrl-Z/);
    expect((await loadState(w.runtime, 'r')).status).toBe('completed');
    // Any other error is not the lock's.
    expect(describeLockedStep(new Error('boom'))).toBeUndefined();
  });

  it('says it in `stepwise run` too (the engine working one run)', async () => {
    db = tempDb();
    const rows = new FakeRows();
    const other = new Database(db.path);
    opened.push({ close: () => { if (other.inTransaction) other.exec('ROLLBACK'); other.close(); } });
    let locked = false;
    const agent = rowsAgent(rows, { afterWrite: () => { if (!locked) { locked = true; other.exec('BEGIN IMMEDIATE'); } } });
    const lines: string[] = [];
    // The lock is let go as the refused step is logged, before its message is handed back.
    const log = createLogger({}, { format: 'json', write: (line) => { lines.push(line); if (line.includes('"step-error"') && other.inTransaction) other.exec('COMMIT'); } });
    const engine = await openLocalEngine(agent, { dbPath: db.path, model: new StubModel(writeRowsScript(1)), log });
    opened.push(engine);
    engine.runtime.db.pragma('busy_timeout = 20');
    await startRun(engine.deps, { goal: 'write 1 row', runId: 'r' });
    expect((await engine.work('r')).state.status).toBe('completed');
    const errors = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => l.event === 'step-error');
    expect(errors).toEqual([expect.objectContaining({ runId: 'r', refused: 'database-locked' })]);
  });

  it('a worker starting while the file is locked skips its start-up pruning with a warning, where it stopped with exit 1', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path });
    opened.push(runtime);
    runtime.db.pragma('busy_timeout = 20');
    const other = new Database(db.path);
    opened.push({ close: () => { if (other.inTransaction) other.exec('ROLLBACK'); other.close(); } });
    other.exec('BEGIN IMMEDIATE');
    // What the worker called at start: the lock refuses it.
    expect(() => runtime.queue.prune()).toThrow(/database is locked/);
    const lines: string[] = [];
    pruneAtStart(runtime, createLogger({}, { format: 'json', write: (line) => lines.push(line) }));
    expect(lines.map((line) => JSON.parse(line) as { event: string; level: string })).toEqual([expect.objectContaining({ event: 'prune-skipped', level: 'warn' })]);
    other.exec('COMMIT');
    expect(() => pruneAtStart(runtime, silentLogger)).not.toThrow();
  });
});

