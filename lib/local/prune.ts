import type { Logger } from '../log.ts';
import { isBusy } from './database.ts';
import { isDiskFull } from './disk-full.ts';
import type { LocalRuntime } from './runtime.ts';

export interface Pruned {
  checkpoints: number;
  tombstones: number;
  events: number;
  blobs: number;
}

/**
 * Everything the local store lets go of: checkpoint versions past the retention window (or older than
 * `olderThanMs`), never a run's latest; acked queue messages past their day as deduplication records;
 * kept events past their window; blobs no step record refers to, once past the grace period. Step
 * records, recorded decisions, idempotency records and live queue messages are never pruned: a running or
 * waiting run, however old, needs them to resume.
 */
export function pruneLocal(runtime: LocalRuntime, options: { olderThanMs?: number } = {}): Pruned {
  return {
    checkpoints: runtime.store.prune(options.olderThanMs !== undefined ? { olderThanMs: options.olderThanMs } : {}),
    tombstones: runtime.queue.prune(),
    events: runtime.events.prune(),
    blobs: runtime.blobs.collect(),
  };
}

/**
 * A worker's housekeeping at start: expired checkpoint versions and acked messages. Another connection
 * holding the write lock past the busy timeout (a long transaction, a process frozen in its commit) skips
 * it until the next start, where it used to stop the worker before its first step (exit 1); so does a full
 * disk (a delete is a write to the -wal too), under which the worker then waits for space to work its runs.
 */
export function pruneAtStart(runtime: LocalRuntime, log: Logger): void {
  try {
    runtime.store.prune();
    runtime.queue.prune();
  } catch (error) {
    if (isDiskFull(error)) {
      log.warn({ event: 'prune-skipped' }, `the disk that holds the database is full: expired checkpoints and acked messages are pruned at the next start (or by stepwise prune); free space on it`);
      return;
    }
    if (!isBusy(error)) throw error;
    log.warn({ event: 'prune-skipped' }, `the database file was locked by another connection: expired checkpoints and acked messages are pruned at the next start (or by stepwise prune)`);
  }
}
