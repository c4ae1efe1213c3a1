import { rng } from './random.ts';

/** The chaos tools' timeoutMs in a schedule that hangs one, in real milliseconds. */
export const HUNG_TOOL_TIMEOUT_MS = 1_000;
/** The reason of a run whose last failed try was a hung tool's. */
export const HUNG_TOOL = /^step \d+ failed \d+ times; last error: tool \w+ did not finish within 1 s \(its timeoutMs\)$/;

/** Whether an in-process schedule hangs a tool, and where. */
export interface HangPlan {
  /** This schedule hangs one tool: it parks no worker, and holds its tools to HUNG_TOOL_TIMEOUT_MS. */
  hangs: boolean;
  /** The chaos tools' time options: the 1 s limit in a schedule that hangs, the default in the others. */
  toolTime: { timeoutMs?: number };
  /** Asked inside each effect: true where this one never returns. */
  hangHere(): boolean;
}

/**
 * In one schedule of `chance` (0.1 by default), one effect never returns while its process lives: the
 * try ends at the tools' timeoutMs, real time, the one clock these schedules do not move by hand. Such a
 * schedule parks no worker, since a park lasts turns of real time (a slow model reply among them) and a
 * frozen worker's try must not end at a time limit while it is frozen; the others keep the default limit,
 * which no park reaches. Drawn from a stream of its own: a schedule that hangs nothing is the one it was
 * before hangs.
 */
export function hangPlan(seed: number, chance = 0.1): HangPlan {
  const h = rng(seed ^ 0x68616e67);
  let left = h.chance(chance) ? 1 : 0;
  const hangs = left > 0;
  return {
    hangs,
    toolTime: hangs ? { timeoutMs: HUNG_TOOL_TIMEOUT_MS } : {},
    hangHere: () => {
      if (left === 0 || !h.chance(0.1)) return false;
      left--;
      return true;
    },
  };
}
