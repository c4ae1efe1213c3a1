import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, linkSync, openSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { InvalidInputError } from '../core/errors.ts';
import { makeDir } from '../make-dir.ts';
import { BUSY_TIMEOUT_MS } from './busy.ts';
import { damagedDatabaseHint, isDamaged } from './damaged.ts';

export interface BackupResult {
  /** The backup's size. */
  bytes: number;
  /** The runs it holds. */
  runs: number;
  /** When the snapshot was read (ms since the epoch): its runs are as they were then. */
  at: number;
}

/**
 * Copies the stepwise database at `source` to a new file at `target`, while its workers run: SQLite's online
 * backup, every page in one step, so under one read transaction, a snapshot of one moment (in smaller steps a
 * write by another process restarts the copy, which under busy workers never ends). The steps committed in
 * the source's -wal are in it; a `cp` of the file alone leaves them out, and a `cp` of the file and its -wal
 * while a worker writes can pair a -wal with a file from before its last checkpoint, damaged with nothing
 * said. The backup is one file in rollback-journal mode, whole by itself (a stepwise process opening it
 * puts it back in WAL). It is written beside `target` under another name, checked (quick_check), made
 * durable, and linked into place only if nothing is there: an existing file is never overwritten, and a
 * backup cut short (a crash, a full disk) never stands at `target`.
 */
export async function backupDatabase(source: string, target: string, clock: () => number = Date.now): Promise<BackupResult> {
  if (target === '') throw new InvalidInputError('the backup path is empty (an unset variable?): give the path of a new file');
  if (!existsSync(source)) throw new InvalidInputError(`no stepwise database at ${source}: check --db or STEPWISE_DB`);
  if (resolve(source) === resolve(target)) throw new InvalidInputError(`the backup path ${target} is the database itself: give the path of a new file`);
  refuseTaken(target);
  let db: Database.Database;
  try {
    // Read and write, though it only reads (query_only below: nor does it bring the file to this release's
    // layout): a read-only connection on a file no other process has open leaves a -wal and a -shm at
    // its path when it closes, which it may not remove.
    db = new Database(source, { fileMustExist: true });
  } catch (error) {
    throw new InvalidInputError(`cannot open the database ${source}: ${(error as Error).message}`, { cause: error });
  }
  const dir = dirname(resolve(target));
  const partial = join(dir, `.${basename(target)}.${randomBytes(6).toString('hex')}.partial`);
  try {
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    db.pragma('query_only = ON');
    let runs: number;
    try {
      runs = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").get()
        ? (db.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n
        : -1;
    } catch (error) {
      throw damagedOr(error, source);
    }
    if (runs < 0) throw new InvalidInputError(`${source} is not a stepwise database (it has no runs table): check --db or STEPWISE_DB`);
    makeDir(dir);
    const at = clock();
    // The first call only sizes the copy; the second copies every page at once.
    await db.backup(partial, { progress: () => 0x7fffffff });
    const copy = new Database(partial);
    try {
      // Damage in the source is copied as it is: a backup that cannot be restored is found now, not then.
      const check = copy.pragma('quick_check', { simple: true });
      if (check !== 'ok') throw new InvalidInputError(`the database ${source} is damaged (${String(check)}), and so would its backup be: ${damagedDatabaseHint('the file', source)}`);
      // The copy's header says WAL, as the source's does: a file that names no -wal is whole by itself.
      copy.pragma('journal_mode = DELETE');
      runs = (copy.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n;
    } catch (error) {
      throw damagedOr(error, source);
    } finally {
      copy.close();
    }
    durable(partial);
    place(partial, target);
    // The link itself, where the platform lets a directory be synced (Windows does not).
    try { durable(dir); } catch { /* the file's own data is synced */ }
    return { bytes: statSync(target).size, runs, at };
  } finally {
    db.close();
    rmSync(partial, { force: true });
    rmSync(`${partial}-journal`, { force: true });
  }
}

/**
 * A file (or anything) at the path is not overwritten: it may be the last good backup. Nor is a -wal or
 * -shm left there: SQLite would read that -wal as the new file's.
 */
function refuseTaken(target: string): void {
  for (const path of [target, `${target}-wal`, `${target}-shm`]) {
    if (existsSync(path)) throw new InvalidInputError(`${path} already exists, and a backup never overwrites: give the path of a new file, or move that one away first`);
  }
}

/** Linked into place, which fails if something got there meanwhile; renamed where links are not kept (some network shares). */
function place(partial: string, target: string): void {
  try {
    linkSync(partial, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') refuseTaken(target);
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP' && code !== 'ENOSYS') throw error;
    refuseTaken(target);
    renameSync(partial, target);
  }
}

function durable(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function damagedOr(error: unknown, source: string): unknown {
  // Not a database at all (another kind of file): the --db to check, as every command says of it.
  if ((error as { code?: unknown }).code === 'SQLITE_NOTADB') return new InvalidInputError(`cannot back up the database ${source}: ${(error as Error).message}: check --db or STEPWISE_DB`, { cause: error });
  if (!isDamaged(error)) return error;
  return new InvalidInputError(`cannot back up the database ${source}: ${(error as Error).message}: ${damagedDatabaseHint('the file', source)}`, { cause: error });
}
