import Database from 'better-sqlite3';
import { copyFileSync, existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { backupDatabase } from '../../lib/local/backup.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { writeOverwrittenFile } from '../support/damaged-files.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const journalBytes = (path: string) => [...readFileSync(path).subarray(18, 20)];
const statusIn = (path: string, runId: string) => {
  const read = openLocalRuntime({ dbPath: path, readOnly: true });
  try {
    return (read.db.prepare('SELECT status FROM runs WHERE run_id = ?').get(runId) as { status: string } | undefined)?.status;
  } finally {
    read.close();
  }
};

/**
 * `stepwise backup`'s copy. There was no supported way to back the file up while workers run: a `cp` of
 * the file alone leaves out the steps committed to its -wal, with nothing said (a run that had finished
 * reads as running some steps back, and its workers redo those steps from the copy).
 */
describe('backupDatabase', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: { close(): void }[] = [];
  afterEach(() => {
    for (const c of opened.splice(0)) c.close();
    db?.cleanup();
  });

  it('holds the steps committed in the -wal, which a copy of the file alone leaves out, as one file that needs no -wal', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(3)), clock, workerId: 'A' });
    opened.push(a.runtime);
    await start(a.deps, 'write 3 rows', 'r');
    await drain(a.deps, a.runtime, clock);
    expect((await loadState(a.runtime, 'r')).status).toBe('completed');
    // The worker still has the file open: its steps are in the -wal.
    const copied = join(dirname(db.path), 'copied.db');
    copyFileSync(db.path, copied);
    expect(statusIn(copied, 'r')).not.toBe('completed');

    const target = join(dirname(db.path), 'backups', 'one.db');
    const made = await backupDatabase(db.path, target, () => 1_700_000_000_000);
    expect(made).toMatchObject({ runs: 1, at: 1_700_000_000_000 });
    expect(made.bytes).toBeGreaterThan(0);
    expect(journalBytes(target)).toEqual([1, 1]);
    expect(existsSync(`${target}-wal`)).toBe(false);
    // Copied on by itself, it is whole.
    const moved = join(dirname(db.path), 'moved.db');
    copyFileSync(target, moved);
    expect(statusIn(moved, 'r')).toBe('completed');
    expect(readdirSync(dirname(target))).toEqual(['one.db']);
  });

  it('never overwrites: a file at the path, or a -wal left there, is refused and kept as it was', async () => {
    db = tempDb();
    openLocalRuntime({ dbPath: db.path }).close();
    const dir = dirname(db.path);
    const target = join(dir, 'last-good.db');
    writeFileSync(target, 'the last good backup');
    await expect(backupDatabase(db.path, target)).rejects.toThrow(`${target} already exists, and a backup never overwrites: give the path of a new file, or move that one away first`);
    expect(readFileSync(target, 'utf8')).toBe('the last good backup');
    // SQLite would read a -wal left at the path as the new file's.
    const other = join(dir, 'other.db');
    writeFileSync(`${other}-wal`, 'a stale wal');
    await expect(backupDatabase(db.path, other)).rejects.toThrow(`${other}-wal already exists`);
    expect(existsSync(other)).toBe(false);
    await expect(backupDatabase(db.path, db.path)).rejects.toThrow(`the backup path ${db.path} is the database itself`);
    await expect(backupDatabase(db.path, '')).rejects.toThrow('the backup path is empty');
    expect(readdirSync(dir).filter((name) => name.includes('partial'))).toEqual([]);
  });

  it('refuses a missing file, one that is not stepwise\'s, and a damaged one, leaving nothing at the path', async () => {
    db = tempDb();
    const dir = dirname(db.path);
    const target = join(dir, 'b.db');
    await expect(backupDatabase(join(dir, 'nope.db'), target)).rejects.toThrow(`no stepwise database at ${join(dir, 'nope.db')}`);
    const other = join(dir, 'other.db');
    const app = new Database(other);
    app.exec('CREATE TABLE t (x)');
    app.close();
    await expect(backupDatabase(other, target)).rejects.toThrow(`${other} is not a stepwise database (it has no runs table)`);
    const text = join(dir, 'notes.txt');
    writeFileSync(text, 'not a database at all, but long enough to hold a header of one; '.repeat(4));
    await expect(backupDatabase(text, target)).rejects.toThrow(`cannot back up the database ${text}: file is not a database`);
    // A page of a table the count does not read: found in the copy by its check, before it is kept.
    writeOverwrittenFile(db.path, 'checkpoints');
    await expect(backupDatabase(db.path, target)).rejects.toThrow(/is damaged .*which no retry mends/);
    expect(readdirSync(dir).sort()).toEqual(['notes.txt', 'other.db', 'stepwise.db']);
  });
});
