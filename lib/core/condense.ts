import type { StepRecord } from './state.ts';

/**
 * The condensing policy for long runs. The prompt lists every completed step until a run has more than
 * CONDENSE_AFTER; then the oldest steps are replaced, a whole block of CONDENSE_BLOCK at a time, by one
 * summary line per block, computed from the records alone (no model call, so the same on every worker).
 * Between condensations the prompt only grows at its end, so the cached prefix of one step starts the
 * next; a condensation changes the list after the summaries already there, which misses the cache once.
 * Between CONDENSE_AFTER - CONDENSE_BLOCK + 1 and CONDENSE_AFTER steps are listed in full, plus one
 * short line per condensed block (past CONDENSE_AFTER such lines, per group of them: CONDENSE_GROUP). Only the prompt is condensed: every step record stays in the store,
 * in `stepwise status` and `stepwise history`. Each block's summary is also stored, once, by the
 * checkpoint that condenses it (condensed.ts), so a resume reads it instead of the block's records: the
 * block size is part of the stored format (a stored summary covers exactly one block).
 */
export const CONDENSE_AFTER = 200;
export const CONDENSE_BLOCK = 100;
/**
 * The summary lines are condensed the same way, so the prompt stays bounded however long the run is: past
 * CONDENSE_AFTER lines of one kind, the oldest become one line per whole group of CONDENSE_GROUP (a line of
 * 10,000 steps, then of 1,000,000). A line per block alone grew the prompt by about 5 KB every 1,000 steps,
 * so a run of days outgrew the model's context window and failed for good: a retry or a fork sends the same.
 * Computed from the block lines alone (stored, so a bounded load builds the same prompt), and only when a
 * block is condensed, so it breaks the prompt cache nowhere a condensation did not already.
 */
export const CONDENSE_GROUP = 100;

/** How many leading groups of CONDENSE_GROUP lines of one kind a list of `lines` such lines shows as one line each. */
export function condensedGroups(lines: number): number {
  return lines > CONDENSE_AFTER ? Math.floor((lines - CONDENSE_AFTER - 1) / CONDENSE_GROUP) + 1 : 0;
}

/** How many leading blocks of CONDENSE_BLOCK steps a run with `steps` completed steps shows as summaries. */
export function condensedBlocks(steps: number): number {
  return steps > CONDENSE_AFTER ? Math.floor((steps - CONDENSE_AFTER - 1) / CONDENSE_BLOCK) + 1 : 0;
}

/** What a summary line says about a block of steps. */
export interface BlockSummary {
  first: StepRecord;
  last: StepRecord;
  count: number;
  /** Calls per tool, most used first (ties by name). */
  tools: [string, number][];
  /** Steps whose result was an error. */
  errors: number[];
}

export function summariseBlock(records: readonly StepRecord[]): BlockSummary {
  if (!records.length) throw new Error('summariseBlock: an empty block');
  const counts = new Map<string, number>();
  const errors: number[] = [];
  for (const record of records) {
    counts.set(record.tool, (counts.get(record.tool) ?? 0) + 1);
    if (!record.result.ok) errors.push(record.step);
  }
  const tools = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return { first: records[0]!, last: records[records.length - 1]!, count: records.length, tools, errors };
}
