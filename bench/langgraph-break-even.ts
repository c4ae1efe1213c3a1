/**
 * How fast a disk 20x LangGraph needs, from bench/langgraph.ts's own figures: each side's step timed with
 * the fsync on and with it off (synchronous=OFF), in the same run. What the fsync adds to a step (on less
 * off: its waits, and the work after each wait running on cold caches) scales with the disk; what is left
 * (off) is each side's own work. On a disk whose fsync costs k times this one's, a step takes
 * off + k * (on - off), and the ratio is LangGraph's over stepwise's: at k = 0 it is the ratio of the work
 * alone, and as k grows it tends to the ratio of what the fsync adds here (6-8x in the runs of 2026-12-05).
 * The model is a local one: it scales the cold-cache work after each wait with the wait, which holds near
 * this disk, where it answers where 20x is crossed. On a disk far slower the waits are all a step costs,
 * and the ratio tends to that of the fsync counts instead (about 4x: bench/fsync-count.ts).
 */
import { fmt } from './support.ts';

/** One side's ms per step with the fsync on and off. */
export interface OnOff { on: number; off: number }

/** The ratio of LangGraph's step to stepwise's on a disk whose fsync costs k times this one's. */
export function ratioAt(k: number, langgraph: OnOff, stepwise: OnOff): number {
  return (langgraph.off + k * (langgraph.on - langgraph.off)) / (stepwise.off + k * (stepwise.on - stepwise.off));
}

/** The ratio's limit as k grows: what the fsync adds to LangGraph's step over what it adds to stepwise's. */
export function fsyncAddedRatio(langgraph: OnOff, stepwise: OnOff): number {
  return (langgraph.on - langgraph.off) / (stepwise.on - stepwise.off);
}

/**
 * Where the ratio meets `target` as the disk's fsync cost scales: `always` or `never` when it is on one
 * side of it at every k, else the k where it crosses, and whether it holds below that k (a faster disk) or
 * above it. The ratio moves one way from its k = 0 value to its limit, so it crosses at most once.
 */
export type FsyncScale = { holds: 'always' | 'never' } | { holds: 'below' | 'above'; k: number };

export function fsyncScaleFor(target: number, langgraph: OnOff, stepwise: OnOff): FsyncScale {
  const addedL = langgraph.on - langgraph.off;
  const addedS = stepwise.on - stepwise.off;
  if (!(addedL > 0 && addedS > 0 && langgraph.off > 0 && stepwise.off > 0)) {
    throw new RangeError(`each side's step must take longer with the fsync than without: LangGraph ${langgraph.on} against ${langgraph.off} ms, stepwise ${stepwise.on} against ${stepwise.off} ms`);
  }
  const atZero = langgraph.off / stepwise.off >= target;
  const inLimit = fsyncAddedRatio(langgraph, stepwise) >= target;
  if (atZero === inLimit) return { holds: atZero ? 'always' : 'never' };
  return { holds: atZero ? 'below' : 'above', k: (langgraph.off - target * stepwise.off) / (target * addedS - addedL) };
}

/** What formatBreakEven reads of one output size's figures in bench/langgraph.ts (its PeerFigures), ms per step. */
export interface StepTimes { bytes: number; floorMs: number; engineMs: number; workerMs: number; langgraph2Ms: number }

/**
 * bench/langgraph.ts's closing lines: from its in-process figures with the fsync on and off, the scale of
 * this disk's fsync cost at which each stepwise path meets 20x LangGraph's two-node loop, and what that
 * is in what the fsync adds to the floor's insert (on less off), the figure a disk can be compared by.
 */
export function formatBreakEven(durable: readonly StepTimes[], workAlone: readonly StepTimes[]): string {
  const lines = ['20x LangGraph JS, agent + tools, as the disk\'s fsync cost scales (a step = its work alone + k x what the fsync adds to it here; in-process figures above, fsync on and off):'];
  for (const [i, on] of durable.entries()) {
    const off = workAlone[i]!;
    const langgraph = { on: on.langgraph2Ms, off: off.langgraph2Ms };
    /** What the fsync adds to the floor's insert here, in us: k = 1. */
    const insertFsyncUs = (on.floorMs - off.floorMs) * 1000;
    const paths = (['engine', 'worker'] as const).map((path) => {
      const stepwise = path === 'engine' ? { on: on.engineMs, off: off.engineMs } : { on: on.workerMs, off: off.workerMs };
      const name = path === 'engine' ? 'engine step' : 'worker path';
      try {
        const scale = fsyncScaleFor(20, langgraph, stepwise);
        const where = 'k' in scale
          ? `met at k ${scale.holds === 'below' ? '<=' : '>='} ${fmt(scale.k, 2)}, an insert's fsync adding ${scale.holds === 'below' ? 'at most' : 'at least'} ${fmt(scale.k * insertFsyncUs, 0)} us`
          : `${scale.holds} met`;
        return `${name} ${where} (${fmt(ratioAt(0, langgraph, stepwise), 1)}x on its work alone, ${fmt(ratioAt(1, langgraph, stepwise), 1)}x here, ${fmt(fsyncAddedRatio(langgraph, stepwise), 1)}x on what the fsync adds)`;
      } catch (error) {
        return `${name}: not measured (${(error as Error).message})`;
      }
    });
    lines.push(`  tool output ${on.bytes} B: ${paths.join('; ')}`);
    lines.push(`    k = 1 is this disk: the fsync adds ${fmt(insertFsyncUs, 0)} us to the insert's ${fmt(on.floorMs * 1000, 0)} us here`);
  }
  return lines.join('\n');
}
