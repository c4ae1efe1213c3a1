import type { StepRecord } from '../core/state.ts';
import type { CheckpointStore } from '../ports.ts';

/** Runs whose decoded step records a process keeps; least recently used beyond this are dropped. */
const MAX_RUNS = 256;

/**
 * Decoded step records per run, kept by a worker process between steps. Step records are written once
 * and never change, so holding them is always safe: the next step loads only the head and the records
 * written since, and the per-step cost stays flat however long the run is. The version check on every
 * write still decides who may advance the run; this only saves re-reading what cannot have changed.
 */
export class StepCache {
  private readonly runs = new Map<string, readonly StepRecord[]>();

  get(runId: string): readonly StepRecord[] | undefined {
    const steps = this.runs.get(runId);
    if (steps) { this.runs.delete(runId); this.runs.set(runId, steps); } // most recently used last
    return steps;
  }

  set(runId: string, steps: readonly StepRecord[]): void {
    this.runs.delete(runId);
    this.runs.set(runId, steps);
    if (this.runs.size > MAX_RUNS) this.runs.delete(this.runs.keys().next().value!);
  }

  delete(runId: string): void {
    this.runs.delete(runId);
  }
}

const caches = new WeakMap<CheckpointStore, StepCache>();

/** One cache per store connection, so it outlives the per-message deps (a Lambda container's runtime). */
export function stepCacheOf(store: CheckpointStore): StepCache {
  let cache = caches.get(store);
  if (!cache) caches.set(store, (cache = new StepCache()));
  return cache;
}
