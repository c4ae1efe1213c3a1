import type Database from 'better-sqlite3';
import { statSync } from 'node:fs';
import { resolve } from 'node:path';

/**
 * The file each connection opened, as its path named it then (device and inode). SQLite keeps writing to
 * the file it opened: deleted, or renamed and another put at its path (a backup restored, `rm` for a fresh
 * start) while a worker runs, the worker went on committing steps into it while every other process read
 * the new file, and what it wrote was lost when it stopped (SQLite's own check, SQLITE_READONLY_DBMOVED,
 * is of the rollback journal, not of WAL).
 */
const opened = new WeakMap<Database.Database, { path: string; dev: number; ino: number; checkedAt: number }>();

/**
 * How long a connection's file goes unlooked-at, at most, between its writes: the stat cost a step about
 * as much as the rest of its commit's bookkeeping (one a step, about 3 us in a loop, more among a step's
 * work), where the fault it finds is an operator's mistake. A worker whose file is moved stops within this
 * long; a side-effecting step's decision and an effect's claim look every time (refuseMovedFile's
 * `always`), so no effect is applied on a file no longer at its path.
 */
export const MOVED_FILE_CHECK_MS = 100;

/** Remembers the file `db` opened at `path`, for refuseMovedFile. */
export function rememberFile(db: Database.Database, path: string): void {
  const absolute = resolve(path);
  const { dev, ino } = statSync(absolute);
  opened.set(db, { path: absolute, dev, ino, checkedAt: performance.now() });
}

/**
 * The file a connection opened is no longer at its path. Not the user's input to fix, nor a fault of the
 * file: the processes on it start again on the file now there (exit code 1). The code is SQLite's for the
 * same fault under a rollback journal.
 */
export class DatabaseMovedError extends Error {
  readonly code = 'SQLITE_READONLY_DBMOVED';
  constructor(readonly path: string, deleted: boolean) {
    super(`the database ${path} was ${deleted ? 'deleted' : 'replaced by another file'} while this process had it open: what it wrote from then on would go to a file no other process reads, and be lost, so it writes nothing more (this write was not kept). Stop every process on the file and start them again; move, restore or delete the file only with them stopped, and its -wal and -shm files with it`);
    this.name = 'DatabaseMovedError';
  }
}

/**
 * Refuses a write on a connection whose file is no longer the one at its path: a stat, at most once every
 * MOVED_FILE_CHECK_MS, or each time with `always` (before an effect is applied). A connection to no file
 * (in memory) is not checked.
 */
export function refuseMovedFile(db: Database.Database, always = false): void {
  const file = opened.get(db);
  if (!file) return;
  const at = performance.now();
  if (!always && at - file.checkedAt < MOVED_FILE_CHECK_MS) return;
  const now = statSync(file.path, { throwIfNoEntry: false });
  if (now && now.dev === file.dev && now.ino === file.ino) {
    file.checkedAt = at;
    return;
  }
  throw new DatabaseMovedError(file.path, !now);
}
