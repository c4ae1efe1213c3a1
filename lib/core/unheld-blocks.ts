import type { CondensedBlock } from './state.ts';

/**
 * The condensed blocks whose records a state from a bounded load does not hold: it counts them from their
 * stored summaries (lib/core/condensed.ts). Types only from state.ts, so lib/llm/cost.ts, which `status`
 * and `show` load, loads no zod with it (test/cli/lazy-imports.test.ts).
 */
export function unheldBlocks(state: { stepsFrom?: number; condensed?: readonly CondensedBlock[] }): readonly CondensedBlock[] {
  const from = state.stepsFrom ?? 0;
  return from ? (state.condensed ?? []).filter((b) => b.last <= from) : [];
}

