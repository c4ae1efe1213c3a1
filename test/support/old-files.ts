import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

/** The runs table as early releases created it, before restarts, waits and cancels had columns of their own. */
export const OLD_RUNS_TABLE = `CREATE TABLE runs (run_id TEXT PRIMARY KEY, version INTEGER NOT NULL, status TEXT NOT NULL, step INTEGER NOT NULL,
  agent TEXT NOT NULL, reason TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);`;

/** Writes a SQLite file as an older release left it (its tables and rows in `sql`), for opening with today's code. */
export function writeOldFile(path: string, sql: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const old = new Database(path);
  try {
    old.exec(sql);
  } finally {
    old.close();
  }
}
