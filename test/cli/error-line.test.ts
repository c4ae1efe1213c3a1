import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { cliErrorLine, readOnlyDatabase } from '../../lib/cli/main.ts';
import { isDamaged } from '../../lib/local/damaged.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { writeOverwrittenFile } from '../support/damaged-files.ts';
import { tempDb } from '../support/harness.ts';

const db = tempDb();
afterAll(() => db.cleanup());

describe('the line the CLI prints for an error', () => {
  it('folds a message over several lines into one', () => {
    expect(cliErrorLine(new Error('Transform failed with 1 error:\n  agent.ts:3:1: ERROR: Unexpected "}"\n'))).toBe('Transform failed with 1 error: agent.ts:3:1: ERROR: Unexpected "}"');
  });

  it("says what to do when the database's disk is full, and that nothing is lost", () => {
    // A real SQLITE_FULL, from a file capped at a few pages.
    const full = new Database(db.path);
    full.exec('CREATE TABLE t (x TEXT)');
    full.pragma('max_page_count = 3');
    let error: unknown;
    try {
      full.prepare('INSERT INTO t VALUES (?)').run('x'.repeat(100_000));
    } catch (e) {
      error = e;
    } finally {
      full.close();
    }
    expect((error as { code: string }).code).toBe('SQLITE_FULL');
    expect(cliErrorLine(error)).toBe('database or disk is full: free space on the disk that holds the database (--db, STEPWISE_DB), then run the command again; each run continues from its last checkpoint');
  });

  it('says why the database is locked and that the command can be run again, where SQLite says only "database is locked"', () => {
    // A real SQLITE_BUSY: another connection (a command frozen by Ctrl-Z inside its commit) holds the write lock.
    const holder = new Database(db.path);
    holder.exec('CREATE TABLE IF NOT EXISTS l (x TEXT); BEGIN IMMEDIATE');
    const writer = new Database(db.path, { timeout: 0 });
    let error: unknown;
    try {
      writer.prepare('INSERT INTO l VALUES (?)').run('x');
    } catch (e) {
      error = e;
    } finally {
      writer.close();
      holder.exec('ROLLBACK');
      holder.close();
    }
    expect((error as { code: string }).code).toBe('SQLITE_BUSY');
    expect(cliErrorLine(error)).toBe('database is locked: another process held the write lock on the database (--db, STEPWISE_DB) for over 10 s (a stepwise command or worker stopped with Ctrl-Z or kill -STOP, a sqlite3 shell inside a transaction); a write that did not finish changed nothing: try again once that process goes on or ends');
  });

  it('says what to do when the database cannot be written, and counts it as bad input (exit code 2)', () => {
    // A real SQLITE_READONLY: what a file, directory or mount the user may not write gives every command.
    const setup = new Database(db.path);
    setup.exec('CREATE TABLE IF NOT EXISTS r (x TEXT)');
    setup.close();
    const readOnly = new Database(db.path, { readonly: true });
    let error: unknown;
    try {
      readOnly.prepare('INSERT INTO r VALUES (?)').run('x');
    } catch (e) {
      error = e;
    } finally {
      readOnly.close();
    }
    expect((error as { code: string }).code).toBe('SQLITE_READONLY');
    expect(readOnlyDatabase(error)).toBe(true);
    expect(cliErrorLine(error)).toBe('attempt to write a readonly database: this user cannot write the database (--db, STEPWISE_DB) or the directory that holds it, where SQLite keeps its -wal and -shm files; give write access to both, or pick another --db');
    expect(readOnlyDatabase(Object.assign(new Error('attempt to write a readonly database'), { code: 'SQLITE_READONLY_DIRECTORY' }))).toBe(true);
    // Not a permission: the file was replaced under an open connection.
    expect(readOnlyDatabase(Object.assign(new Error('attempt to write a readonly database'), { code: 'SQLITE_READONLY_DBMOVED' }))).toBe(false);
    expect(readOnlyDatabase(new Error('database or disk is full'))).toBe(false);
  });

  it('says the database is damaged and how to get back what it holds, and counts it as the file to mend (exit code 2)', async () => {
    // A real SQLITE_CORRUPT, past the open: the runs table's page overwritten, which listing the runs reads.
    const damaged = tempDb();
    writeOverwrittenFile(damaged.path, 'runs');
    const runtime = openLocalRuntime({ dbPath: damaged.path, readOnly: true });
    let error: unknown;
    try {
      await runtime.store.list();
    } catch (e) {
      error = e;
    } finally {
      runtime.close();
      damaged.cleanup();
    }
    expect((error as { code: string }).code).toMatch(/^SQLITE_CORRUPT/);
    expect(isDamaged(error)).toBe(true);
    expect(cliErrorLine(error)).toBe('database disk image is malformed: the database (--db, STEPWISE_DB) is damaged (cut short, or overwritten in part), which no retry mends: stop the workers on it, then restore it from a backup, or recover what it holds into a new file (sqlite3 <file> .recover | sqlite3 recovered.db) and use that, or pick another --db');
    expect(isDamaged(new Error('database or disk is full'))).toBe(false);
  });
});
