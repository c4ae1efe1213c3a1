import type { HeldSteps } from './codec.ts';
import { CONDENSE_BLOCK, condensedBlocks } from './condense.ts';
import { summaryLine } from './prompt.ts';
import { ZERO_USAGE, addUsage, type BlockCost, type CondensedBlock, type RunState, type StepRecord, type Usage } from './state.ts';

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

/**
 * What a block's records cost, or undefined when it cannot be said from them alone (a record with usage
 * that names no model). Priced in lib/llm/cost.ts, which this pure module does not import.
 */
export type BlockPricing = (records: readonly StepRecord[]) => BlockCost | undefined;

/** A block's stored summary, from its records; with their cost when `price` can say it. */
export function condensedBlock(records: readonly StepRecord[], price?: BlockPricing): CondensedBlock {
  const block: CondensedBlock = {
    last: records[records.length - 1]!.step, line: summaryLine(records),
    usage: records.reduce<Usage>((sum, r) => addUsage(sum, r.usage), { ...ZERO_USAGE }),
  };
  const cost = price?.(records);
  if (cost) block.cost = cost;
  return block;
}

/** The summaries a checkpoint of `state` writes: the condensed blocks not stored yet, oldest first. */
export function summariesDue(state: Pick<RunState, 'step' | 'steps' | 'stepsFrom' | 'condensed'>, price?: BlockPricing): CondensedBlock[] {
  const from = state.stepsFrom ?? 0;
  const stored = state.condensed?.length ?? 0;
  const due: CondensedBlock[] = [];
  for (let b = stored; b < Math.min(condensedBlocks(state.step), stored + MAX_SUMMARIES_PER_WRITE); b++) {
    due.push(condensedBlock(state.steps.slice(b * CONDENSE_BLOCK - from, (b + 1) * CONDENSE_BLOCK - from), price));
  }
  return due;
}

/**
 * What a worker keeps of a run after writing `state` with `written` summaries: the summaries, and only
 * the records after them, which is exactly what a bounded load would give it. A run with a dollar budget
 * (`price` given) needs each block's cost: a summary written without one (by code before summary format
 * 2) is given it here from the records this state holds, and, where that cannot be done, every record
 * stays held. One whose cost names a model with no price is priced again from the records held, the same
 * where the table still has none.
 */
export function heldAfter(state: RunState, written: readonly CondensedBlock[], price?: BlockPricing): HeldSteps {
  const from = state.stepsFrom ?? 0;
  let condensed = [...(state.condensed ?? []), ...written];
  if (price && condensed.some(costDue)) condensed = condensed.map((b) => (!costDue(b) || b.last - CONDENSE_BLOCK < from ? b : costedBlock(state, b, price)));
  const keepRecords = price !== undefined && condensed.some((b) => !b.cost);
  const to = keepRecords ? from : Math.max(from, condensed.length * CONDENSE_BLOCK);
  return { from: to, steps: to === from ? state.steps : state.steps.slice(to - from), condensed, createdAt: state.createdAt };
}

/**
 * A block whose cost `price` may say better: none, or one with usage the pricing of its day could not price
 * (a model added to the table since; lib/llm/cost.ts summaryCost sets such a cost aside).
 */
const costDue = (b: CondensedBlock): boolean => !b.cost || b.cost.unpriced !== undefined;

/** A stored block without its cost, given it from the records `state` holds (held in memory, never stored). */
function costedBlock(state: RunState, block: CondensedBlock, price: BlockPricing): CondensedBlock {
  const from = state.stepsFrom ?? 0;
  const cost = price(state.steps.slice(block.last - CONDENSE_BLOCK - from, block.last - from));
  return cost ? { ...block, cost } : block;
}
