import Database from 'better-sqlite3';
import { chmodSync, existsSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
/** The file header's write and read versions: 1 for a rollback journal, 2 for WAL. */
const journalBytes = (path: string) => [...readFileSync(path).subarray(18, 20)];

/**
 * A command that only reads (status, history, show, drift) on a file in rollback-journal mode: a backup
 * (`stepwise backup` writes one so, whole by itself), often made read-only to keep it safe. The reader
 * switched every file it opened to WAL, a write: it changed the backup it only meant to read, and on a
 * file the user cannot write (chmod 444, read-only storage) it failed with "attempt to write a readonly
 * database", so a backup could not be looked into before restoring it.
 */
describe('reading a file in rollback-journal mode', { timeout: 60_000 }, () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('status reads a read-only backup as it is, and leaves it in its journal mode', async () => {
    db = tempDb();
    const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write rows', '--run-id', 'kept-1', '--db', db.path], { STEPWISE_LOG_FORMAT: 'json' });
    expect(started.code).toBe(0);
    const file = new Database(db.path);
    file.pragma('journal_mode = DELETE');
    file.close();
    expect(journalBytes(db.path)).toEqual([1, 1]);
    chmodSync(db.path, 0o444);

    const shown = await stepwiseCli(['status', '--db', db.path], { STEPWISE_LOG_FORMAT: 'json' });
    expect(shown.err).toBe('');
    expect(shown.code).toBe(0);
    expect(shown.out).toMatch(/kept-1\s+running\s+0/);
    // Untouched: still a rollback-journal file, with no -wal beside it.
    expect(journalBytes(db.path)).toEqual([1, 1]);
    expect(existsSync(`${db.path}-wal`)).toBe(false);
    chmodSync(db.path, 0o644);
  });
});
