import type { HeldSteps } from '../core/codec.ts';
import type { CheckpointStore } from '../ports.ts';

/** Runs whose decoded step records a process keeps; least recently used beyond this are dropped. */
const MAX_RUNS = 256;

/**
 * Decoded step records per run, kept by a worker process between steps: the summaries of the condensed
 * blocks and the records after them, as a bounded load gives them (lib/core/condensed.ts). Step records
 * and summaries are written once and never change, so holding them is always safe: the next step loads
 * only the head and the records written since, and the per-step cost stays flat however long the run is.
 * The version check on every write still decides who may advance the run; this only saves re-reading
 * what cannot have changed.
 */
export class StepCache {
  private readonly runs = new Map<string, HeldSteps>();

  get(runId: string): HeldSteps | undefined {
    const steps = this.runs.get(runId);
    if (steps) { this.runs.delete(runId); this.runs.set(runId, steps); } // most recently used last
    return steps;
  }

  set(runId: string, steps: HeldSteps): void {
    this.runs.delete(runId);
    this.runs.set(runId, steps);
    if (this.runs.size > MAX_RUNS) this.runs.delete(this.runs.keys().next().value!);
  }

  delete(runId: string): void {
    this.runs.delete(runId);
  }
}

/**
 * What a load for a run's next step asks of the store: the records after those held, or, holding none (a
 * cold resume), the bounded read: the block summaries and the records after them.
 */
export function resumeLoad(held: HeldSteps | undefined): { afterStep: number } | { recent: true } {
  const after = held ? held.from + held.steps.length : 0;
  return after ? { afterStep: after } : { recent: true };
}

const caches = new WeakMap<CheckpointStore, StepCache>();

/** One cache per store connection, so it outlives the per-message deps (a Lambda container's runtime). */
export function stepCacheOf(store: CheckpointStore): StepCache {
  let cache = caches.get(store);
  if (!cache) caches.set(store, (cache = new StepCache()));
  return cache;
}
