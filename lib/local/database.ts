import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

export type Db = Database.Database;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS runs (
  run_id     TEXT PRIMARY KEY,
  version    INTEGER NOT NULL,
  status     TEXT NOT NULL,
  step       INTEGER NOT NULL,
  agent      TEXT NOT NULL,
  reason     TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, updated_at);

-- One row per version: the run head as written then. Older rows expire after the retention window;
-- the latest (runs.version) is never pruned.
CREATE TABLE IF NOT EXISTS checkpoints (
  run_id          TEXT NOT NULL,
  version         INTEGER NOT NULL,
  step            INTEGER NOT NULL,
  status          TEXT NOT NULL,
  tool            TEXT,
  idempotency_key TEXT,
  worker_id       TEXT NOT NULL,
  code_version    TEXT NOT NULL,
  bytes           INTEGER NOT NULL,
  head            TEXT NOT NULL,
  reason          TEXT,
  created_at      INTEGER NOT NULL,
  expires_at      INTEGER NOT NULL,
  PRIMARY KEY (run_id, version)
) WITHOUT ROWID;

-- One row per step, written once: the decision (before a side-effecting tool runs), then the record.
CREATE TABLE IF NOT EXISTS steps (
  run_id   TEXT NOT NULL,
  step     INTEGER NOT NULL,
  decision TEXT,
  record   TEXT,
  PRIMARY KEY (run_id, step)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS blobs (
  ref        TEXT PRIMARY KEY,
  bytes      INTEGER NOT NULL,
  data       BLOB NOT NULL,
  created_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS ledger (
  key         TEXT PRIMARY KEY,
  args_hash   TEXT NOT NULL,
  status      TEXT NOT NULL,
  result      TEXT,
  lease_until INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL
);

-- The local queue. dedup_key makes a repeated send of the same (run, version) a no-op; acked rows stay
-- as tombstones for a day so late duplicates are still recognised.
CREATE TABLE IF NOT EXISTS queue (
  id            INTEGER PRIMARY KEY,
  dedup_key     TEXT NOT NULL UNIQUE,
  run_id        TEXT NOT NULL,
  body          TEXT NOT NULL,
  visible_at    INTEGER NOT NULL,
  receive_count INTEGER NOT NULL DEFAULT 0,
  receipt       TEXT,
  acked_at      INTEGER,
  created_at    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_ready ON queue (acked_at, visible_at);
`;

/**
 * Opens (and creates) the stepwise database: WAL, waits on other processes' locks.
 * `durability: 'full'` (checkpoints, the ledger) fsyncs every commit, so an acknowledged write survives a
 * power cut. `'process'` (the queue) skips the fsync: its commits survive any process crash, and a power
 * cut can only drop the newest ones, in order (the WAL is replayed as a prefix). A dropped send is then
 * dropped with its later ack, so the message before it is delivered again and re-drives the run; a
 * dropped ack or receive is a duplicate delivery, which the version check makes a no-op.
 */
export function openDatabase(path: string, durability: 'full' | 'process' = 'full'): Db {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma(durability === 'full' ? 'synchronous = FULL' : 'synchronous = NORMAL');
  // Several worker processes share the file; a writer waits for the lock instead of failing.
  db.pragma('busy_timeout = 10000');
  db.exec(SCHEMA);
  return db;
}

/** BEGIN IMMEDIATE: take the write lock up front, so a read-then-write cannot be raced by another process. */
export function immediate<T>(db: Db, fn: () => T): T {
  return db.transaction(fn).immediate();
}
