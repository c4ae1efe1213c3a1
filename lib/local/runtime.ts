import { retentionMsFromEnv } from '../core/retention.ts';
import type { Logger } from '../log.ts';
import type { Clock } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { openDatabase, openDatabaseToRead, type Db } from './database.ts';
import { SqliteBlobStore } from './sqlite-blob-store.ts';
import { SqliteCheckpointStore } from './sqlite-checkpoint-store.ts';
import { SqliteEventBuffer } from './sqlite-event-buffer.ts';
import { SqliteLedger } from './sqlite-ledger.ts';
import { SqliteQueue } from './sqlite-queue.ts';

import { DEFAULT_DB_PATH, expandHome } from './paths.ts';

export { DEFAULT_DB_PATH };

export interface LocalRuntime {
  db: Db;
  store: SqliteCheckpointStore;
  blobs: SqliteBlobStore;
  ledger: SqliteLedger;
  queue: SqliteQueue;
  /** Events kept for waits that have not begun yet. */
  events: SqliteEventBuffer;
  close(): void;
}

/** The embedded default: checkpoints, blobs, the idempotency ledger, the queue and kept events in one SQLite file. */
/** `retentionMs`: how long older checkpoint versions stay (default STEPWISE_RETENTION_DAYS, else 14 days). */
/** `readOnly`: for a command that only reads; the file is neither written nor brought to this layout (openDatabaseToRead). */
/** `log`: where a step back of the clock found in the file is said (clock-step.ts; default: stderr). */
export function openLocalRuntime(options: { dbPath?: string; clock?: Clock; retentionMs?: number; readOnly?: boolean; log?: Logger } = {}): LocalRuntime {
  const path = expandHome(options.dbPath ?? DEFAULT_DB_PATH);
  const retentionMs = options.retentionMs ?? retentionMsFromEnv(process.env);
  const db = options.readOnly ? openDatabaseToRead(path) : openDatabase(path);
  // The queue and the blobs get a connection without per-commit fsync (see openDatabase for why that is
  // safe for the queue). A step's blob is written by its checkpoint's own transaction (carriesBlobs); any
  // other put (a wait's answer) is written before the checkpoint that refers to it, and the WAL replays
  // as a prefix: the checkpoint's fsync makes the blob durable too, and a power cut that drops the blob
  // drops that checkpoint with it. So a step with a large output is one fsync, not two.
  // Reading, one connection does: an older file's copy in memory is that connection's alone.
  const queueDb = options.readOnly ? db : openDatabase(path, 'process');
  const clock = options.clock ?? systemClock;
  return {
    db,
    // Its commits do each step's send and ack, and write its blob, too: one durable transaction per step
    // (the queue and the blobs are in this file).
    store: new SqliteCheckpointStore(db, { clock, carriesQueueWork: true, carriesBlobs: true, ...(retentionMs !== undefined ? { retentionMs } : {}) }),
    blobs: new SqliteBlobStore(queueDb, clock),
    ledger: new SqliteLedger(db, clock, options.log),
    queue: new SqliteQueue(queueDb, { clock, ...(options.log ? { log: options.log } : {}) }),
    events: new SqliteEventBuffer(db, { clock }),
    close: () => { if (queueDb !== db) queueDb.close(); db.close(); },
  };
}
