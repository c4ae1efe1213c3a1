import type { HeldSteps } from './codec.ts';
import { CONDENSE_BLOCK, condensedBlocks } from './condense.ts';
import { summaryLine } from './prompt.ts';
import { ZERO_USAGE, addUsage, type CondensedBlock, type RunState, type StepRecord, type Usage } from './state.ts';

/**
 * The stored side of condensing (lib/core/condense.ts): the summary of each condensed block is written
 * once, by the checkpoint that condenses it, so a resume reads the summaries and the records after them,
 * at most CONDENSE_AFTER, however long the run. Every record stays in the store for everything else.
 */

/**
 * Summaries one checkpoint writes at most: a run condensed before summaries were stored (or a fork, which
 * copies records only) gets its backlog over a few checkpoints. Small next to DynamoDB's 100 items a write.
 */
export const MAX_SUMMARIES_PER_WRITE = 50;

/** A block's stored summary, from its records. */
export function condensedBlock(records: readonly StepRecord[]): CondensedBlock {
  return {
    last: records[records.length - 1]!.step, line: summaryLine(records),
    usage: records.reduce<Usage>((sum, r) => addUsage(sum, r.usage), { ...ZERO_USAGE }),
  };
}

/** The summaries a checkpoint of `state` writes: the condensed blocks not stored yet, oldest first. */
export function summariesDue(state: Pick<RunState, 'step' | 'steps' | 'stepsFrom' | 'condensed'>): CondensedBlock[] {
  const from = state.stepsFrom ?? 0;
  const stored = state.condensed?.length ?? 0;
  const due: CondensedBlock[] = [];
  for (let b = stored; b < Math.min(condensedBlocks(state.step), stored + MAX_SUMMARIES_PER_WRITE); b++) {
    due.push(condensedBlock(state.steps.slice(b * CONDENSE_BLOCK - from, (b + 1) * CONDENSE_BLOCK - from)));
  }
  return due;
}

/**
 * What a worker keeps of a run after writing `state` with `written` summaries: the summaries, and only
 * the records after them, which is exactly what a bounded load would give it. `keepRecords` keeps every
 * record held (a run whose dollar budget prices each step).
 */
export function heldAfter(state: RunState, written: readonly CondensedBlock[], keepRecords = false): HeldSteps {
  const condensed = [...(state.condensed ?? []), ...written];
  const from = state.stepsFrom ?? 0;
  const to = keepRecords ? from : Math.max(from, condensed.length * CONDENSE_BLOCK);
  return { from: to, steps: to === from ? state.steps : state.steps.slice(to - from), condensed };
}

/** The usage the step records carry, held or condensed. */
export function carriedUsage(state: Pick<RunState, 'steps' | 'condensed' | 'stepsFrom'>): Usage {
  const from = state.stepsFrom ?? 0;
  // Only the blocks the state does not hold count from their summaries; the rest from the records.
  const blocks = (state.condensed ?? []).filter((b) => b.last <= from);
  return [...blocks.map((b) => b.usage), ...state.steps.map((s) => s.usage)].reduce<Usage>((sum, u) => addUsage(sum, u), { ...ZERO_USAGE });
}
