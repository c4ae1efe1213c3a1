/**
 * How many times a step waits for the disk: fsync calls per step of each case of bench/langgraph.ts (the
 * floor's insert, stepwise's engine step and worker path, LangGraph's one-node and two-node loops), at
 * 500 B and 20 KB outputs, counted by the kernel (`strace -f -c`), not timed. A process running `many`
 * runs of a case less one running `few`, so starting the process and creating its file cancel out, and
 * the WAL checkpoints the runs cause are counted in. The time ratios of langgraph.ts move with the
 * machine; these counts do not, and they say what the ratio tends to where the fsync is all a step costs.
 *
 *   node --import tsx bench/fsync-count.ts [many] [few]
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cannotTrace, countSyncCalls, SYNC_CALLS } from './fsync-count-support.ts';
import { benchCounts } from './args-support.ts';
import { CASE_LABELS } from './langgraph.ts';
import { codeMeasured, fmt, tempDir } from './support.ts';

const STEPS = 60;
const [MANY, FEW] = benchCounts([{ name: 'many', fallback: 6, least: 2 }, { name: 'few', fallback: 1 }]) as [number, number];
const SIZES = [500, 20_000];
const LANGGRAPH = fileURLToPath(new URL('./langgraph.ts', import.meta.url));

/** The sync calls of one process running `runs` runs of case `index` on a new file in `dir`. */
function countRuns(dir: string, index: number, bytes: number, runs: number): number {
  const files = join(dir, `runs-${runs}`);
  mkdirSync(files, { recursive: true });
  // The same Node options as this process: the compiled code under bench/compiled.mjs, as npm run bench runs it.
  const command = [process.execPath, ...process.execArgv, LANGGRAPH, '--case', String(index), '--bytes', String(bytes), '--dir', files, '--runs', String(runs)];
  return countSyncCalls(command, join(dir, `strace-${index}-${bytes}-${runs}.txt`));
}

if (MANY <= FEW) {
  // Their difference divides the counts: as the usage line of a bad count, not a stack.
  process.stderr.write(`fsync-count.ts: many runs must be more than few, not ${MANY} and ${FEW}\nusage: node --import tsx bench/fsync-count.ts [many] [few]\n`);
  process.exit(2);
}
const why = cannotTrace();
if (why) {
  console.log(`fsync calls per step: not counted, ${why}`);
} else {
  const { dir, cleanup } = tempDir();
  try {
    console.log(`fsync calls per step, counted by the kernel (strace -f -c: ${SYNC_CALLS.join(', ')}): a process of ${MANY} runs of ${STEPS} steps less one of ${FEW}, over ${(MANY - FEW) * STEPS} steps; SQLite WAL + synchronous=FULL; ${codeMeasured()}`);
    for (const bytes of SIZES) {
      console.log(`tool output ${bytes} B:`);
      const perStep = CASE_LABELS.map((_label, index) => (countRuns(dir, index, bytes, MANY) - countRuns(dir, index, bytes, FEW)) / ((MANY - FEW) * STEPS));
      const engine = perStep[1]!;
      for (const [index, label] of CASE_LABELS.entries()) {
        const calls = perStep[index]!;
        console.log(`  ${label.padEnd(38)} ${fmt(calls, 2).padStart(5)}${index >= 3 ? `   ${fmt(calls / engine, 1)}x the engine step's` : ''}`);
      }
    }
    console.log('Where the fsync is all a step costs (a slow disk), the time ratio of bench/langgraph.ts tends to these; above them, it is what each side computes per step.');
  } finally {
    cleanup();
  }
}
