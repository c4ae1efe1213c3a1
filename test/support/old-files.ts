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

/**
 * Rewrites a file of today's layout as releases before the numbered checkpoints held it: the checkpoints
 * in a WITHOUT ROWID table keyed (run_id, version), the runs with no number. Rows and their values stay.
 */
export function keyCheckpointsAsBefore(path: string): void {
  const old = new Database(path);
  try {
    old.exec(`CREATE TABLE checkpoints_before (run_id TEXT NOT NULL, version INTEGER NOT NULL, step INTEGER NOT NULL, status TEXT NOT NULL,
        tool TEXT, idempotency_key TEXT, worker_id TEXT NOT NULL, code_version TEXT NOT NULL, bytes INTEGER NOT NULL, record TEXT,
        head TEXT NOT NULL, reason TEXT, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (run_id, version)) WITHOUT ROWID;
      INSERT INTO checkpoints_before SELECT run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, record, head, reason, created_at, expires_at FROM checkpoints;
      DROP TABLE checkpoints;
      ALTER TABLE checkpoints_before RENAME TO checkpoints;
      DROP INDEX runs_by_number;
      ALTER TABLE runs DROP COLUMN run_no;`);
  } finally {
    old.close();
  }
  // Those releases keyed their steps (run_id, step) too.
  keyStepsAsBefore(path);
}

/**
 * Rewrites a file of today's layout as layout 1 held it: the steps in a WITHOUT ROWID table keyed
 * (run_id, step), stamped 1. Rows and their values stay.
 */
export function keyStepsAsBefore(path: string): void {
  const old = new Database(path);
  try {
    old.exec(`CREATE TABLE steps_before (run_id TEXT NOT NULL, step INTEGER NOT NULL, decision TEXT, record TEXT, PRIMARY KEY (run_id, step)) WITHOUT ROWID;
      INSERT INTO steps_before SELECT run_id, step, decision, record FROM steps;
      DROP TABLE steps;
      ALTER TABLE steps_before RENAME TO steps;
      PRAGMA user_version = 1;`);
  } finally {
    old.close();
  }
}
