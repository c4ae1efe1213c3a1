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
