/**
 * Per-step overhead of the engine on the embedded SQLite store, against the floor: one durable SQLite
 * insert (WAL, synchronous=FULL) per transaction, measured in the same run, interleaved round by round
 * so machine drift hits both alike. Stub model, no-op tool: what is left is the engine and its writes.
 *
 *   node --import tsx bench/step-overhead.ts [steps-per-round] [rounds]
 */
import { join } from 'node:path';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { benchDeps, durableInsertFloor, fmt, instantModel, median, noopAgent, openBenchRuntime, tempDir, workerPathMsPerStep } from './support.ts';

const STEPS = Number(process.argv[2] ?? 300);
const ROUNDS = Number(process.argv[3] ?? 5);

type Case = { name: string; run(round: number): Promise<number> };

/** The floor: one row inserted and fsynced per transaction, 500 B payload like a small checkpoint. */
function floorCase(dir: string): Case {
  const floor = durableInsertFloor(join(dir, 'floor.db'));
  return { name: 'floor: one durable SQLite insert', run: async () => floor.msPerInsert(STEPS) };
}

/** advance() in a loop: load, model, tool, checkpoint. */
function engineCase(dir: string, sideEffect: boolean): Case {
  const runtime = openBenchRuntime(dir, `engine-${sideEffect}`);
  const deps = benchDeps(runtime, noopAgent({ sideEffect }), instantModel('noop'));
  return {
    name: sideEffect ? 'engine step, side-effecting tool (decision recorded)' : 'engine step, read-only tool',
    async run(round) {
      const runId = `r${round}`;
      await startRun(deps, { goal: 'bench', runId });
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < STEPS; i++) await advance(deps, runId);
      return Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;
    },
  };
}

/**
 * The whole worker path per step, as runWorker does it: receive, advance, send, ack; on this runtime the
 * step's checkpoint does the send, the ack and the next receive in its transaction.
 */
function workerCase(dir: string): Case {
  const runtime = openBenchRuntime(dir, 'worker');
  const deps = benchDeps(runtime, noopAgent({ sideEffect: false }), instantModel('noop'));
  return {
    name: 'worker step: runWorker (receive + step + send + ack)',
    async run(round) {
      const runId = `w${round}`;
      await startRun(deps, { goal: 'bench', runId });
      return workerPathMsPerStep(deps, runtime, STEPS);
    },
  };
}

async function main(): Promise<void> {
  const { dir, cleanup } = tempDir();
  try {
    const cases = [floorCase(dir), engineCase(dir, false), engineCase(dir, true), workerCase(dir)];
    const results = new Map<string, number[]>(cases.map((c) => [c.name, []]));
    for (let round = 0; round <= ROUNDS; round++) {
      for (const c of cases) {
        const ms = await c.run(round);
        if (round > 0) results.get(c.name)!.push(ms); // round 0 warms caches and the JIT
      }
    }
    const floor = median(results.get(cases[0]!.name)!);
    console.log(`per-step time, ${STEPS} steps x ${ROUNDS} rounds (median of rounds), SQLite WAL + synchronous=FULL`);
    console.log('case'.padEnd(58), 'ms/step'.padStart(8), 'x floor'.padStart(8), 'min..max'.padStart(14));
    for (const c of cases) {
      const xs = results.get(c.name)!;
      console.log(c.name.padEnd(58), fmt(median(xs), 3).padStart(8), fmt(median(xs) / floor, 2).padStart(8), `${fmt(Math.min(...xs), 3)}..${fmt(Math.max(...xs), 3)}`.padStart(14));
    }
  } finally {
    cleanup();
  }
}

await main();
