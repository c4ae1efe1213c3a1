import type { HeldSteps } from '../core/codec.ts';
import type { CheckpointStore } from '../ports.ts';

/** Runs whose decoded step records a process keeps; least recently used beyond this are dropped. */
const MAX_RUNS = 256;

/**
 * The most characters of step output and heads the held runs keep between them (V8 keeps most as one byte
 * each): 256 runs of 200 records of 4 KB outputs held 242 MB, near the worker function's 256 MB default
 * on Lambda, whose container sees messages of every run. Past it the least recently used go; a run dropped
 * loads its bounded read again, as a cold resume does.
 */
export const MAX_HELD_CHARS = 24 * 1024 * 1024;

/**
 * Decoded step records per run, kept by a worker process between steps: the summaries of the condensed
 * blocks and the records after them, as a bounded load gives them (lib/core/condensed.ts). Step records
 * and summaries are written once and never change (a run deleted and started again under its id is another
 * run, told apart by its creation time: HeldSteps.createdAt), so holding them is safe: the next step loads
 * only the head and the records written since, and the per-step cost stays flat however long the run is.
 * The version check on every write still decides who may advance the run; this only saves re-reading
 * what cannot have changed.
 */
export class StepCache {
  private readonly runs = new Map<string, { steps: HeldSteps; chars: number }>();
  private chars = 0;

  constructor(private readonly maxChars = MAX_HELD_CHARS) {}

  get(runId: string): HeldSteps | undefined {
    const held = this.runs.get(runId);
    if (held) { this.runs.delete(runId); this.runs.set(runId, held); } // most recently used last
    return held?.steps;
  }

  set(runId: string, steps: HeldSteps): void {
    this.delete(runId);
    const chars = heldChars(steps);
    this.runs.set(runId, { steps, chars });
    this.chars += chars;
    // The run just set stays, whatever its size: its next step needs it most.
    while (this.runs.size > MAX_RUNS || (this.chars > this.maxChars && this.runs.size > 1)) this.delete(this.runs.keys().next().value!);
  }

  delete(runId: string): void {
    const held = this.runs.get(runId);
    if (!held) return;
    this.runs.delete(runId);
    this.chars -= held.chars;
  }

  /** The characters held now, for tests. */
  heldChars(): number {
    return this.chars;
  }
}

/** What a run's held records weigh: their outputs' text (inline, up to the inline limit each) and the head's, the parts that grow. */
function heldChars(held: HeldSteps): number {
  let chars = held.head?.text.length ?? 0;
  for (const record of held.steps) chars += record.result.text.length;
  return chars;
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
