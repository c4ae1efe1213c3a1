import { copyFileSync, renameSync, unlinkSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import type { Handled } from '../../lib/engine/handle-message.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { MOVED_FILE_CHECK_MS } from '../../lib/local/moved-file.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * The database file deleted, or a backup restored over it, while a worker runs. SQLite writes on to the
 * file it opened: the worker went on committing steps into a file no other process read (the run looked
 * stuck to them), and lost them when it stopped. It must stop at its next write instead, writing nothing.
 */
describe('a worker whose database file is deleted or replaced while it runs', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: { close(): void }[] = [];
  afterEach(() => {
    for (const c of opened.splice(0)) c.close();
    db?.cleanup();
  });
  const completed = (h: Handled) => h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status === 'completed';

  it.each(['replaced by another file', 'deleted'])('%s: it refuses its next side-effecting step\'s decision, so no effect is applied after the fault, and its run goes on from the file now there', async (how) => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(4)), clock, workerId: 'A' });
    opened.push(a.runtime);
    await start(a.deps, 'write 4 rows', 'r');
    const backup = `${db.path}.backup`;
    let handled = 0;
    const worker = runWorker(a.deps, a.runtime.queue, {
      visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0,
      onHandled: (h) => {
        handled++;
        // A backup after step 1; after step 2 the file is moved away, and the backup put in its place.
        if (handled === 1) a.runtime.db.exec(`VACUUM INTO '${backup}'`);
        if (handled === 2) {
          if (how === 'deleted') unlinkSync(db.path);
          else {
            renameSync(db.path, `${db.path}.moved`);
            copyFileSync(backup, db.path);
          }
        }
        return completed(h);
      },
    });
    await expect(worker).rejects.toThrow(`the database ${db.path} was ${how} while this process had it open: what it wrote from then on would go to a file no other process reads, and be lost, so it writes nothing more (this write was not kept)`);
    // Step 3's decision, written before its tool runs, was refused: no effect after the fault.
    expect(rows.received).toEqual(['r/step-1', 'r/step-2']);
    if (how === 'deleted') return;
    // A worker started again on the file now there finishes the run, each step applied once. (It may take
    // the run up from step 2: SQLite leaves the first file's -wal at the path, and reads it with the new one.)
    opened.splice(0).forEach((c) => c.close());
    const b = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(4)), clock, workerId: 'B' });
    opened.push(b.runtime);
    await drain(b.deps, b.runtime, clock);
    expect((await loadState(b.runtime, 'r')).status).toBe('completed');
    expect([...rows.rows.keys()]).toEqual(['r/step-1', 'r/step-2', 'r/step-3', 'r/step-4']);
    expect(b.runtime.db.pragma('integrity_check', { simple: true })).toBe('ok');
  });

  it('a worker of read-only steps stops at its first write once MOVED_FILE_CHECK_MS have passed, which it refuses', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const count = () => ({ kind: 'tool' as const, tool: 'count_rows', input: {} });
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(count), clock, workerId: 'A' });
    opened.push(a.runtime);
    await start(a.deps, 'count the rows, again and again', 'r');
    let handled = 0;
    const advanced: number[] = [];
    const worker = runWorker(a.deps, a.runtime.queue, {
      visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0,
      onHandled: (h) => {
        if (h.action === 'ack' && h.outcome?.kind === 'advanced') advanced.push(h.outcome.state.steps.length);
        if (++handled === 2) {
          unlinkSync(db.path);
          // The look at the file is at most this far apart (a step's stat is its cost): past it, the next
          // write looks, finds the file gone, and is refused.
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, MOVED_FILE_CHECK_MS + 20);
        }
        return handled > 50;
      },
    });
    await expect(worker).rejects.toThrow(`the database ${db.path} was deleted while this process had it open`);
    // Step 3's checkpoint was refused: the worker stopped having advanced the run no further.
    expect(advanced).toEqual([1, 2]);
  });

  it('an effect\'s claim looks at the file every time: moved an instant ago, the claim is refused and the effect never runs', async () => {
    db = tempDb();
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock: new ManualClock(), workerId: 'A' });
    opened.push(a.runtime);
    let ran = 0;
    await a.runtime.ledger.once('r/step-1', {}, () => ++ran);
    // Within MOVED_FILE_CHECK_MS of the last look: an ordinary write would not look again yet.
    unlinkSync(db.path);
    await expect(a.runtime.ledger.once('r/step-2', {}, () => ++ran)).rejects.toThrow(`the database ${db.path} was deleted while this process had it open`);
    expect(ran).toBe(1);
  });
});
