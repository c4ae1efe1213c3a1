/**
 * What `ctx.once` costs on the embedded SQLite ledger, against the floor: one durable SQLite insert (WAL,
 * synchronous=FULL), measured in the same run, interleaved round by round so machine drift hits both alike.
 * Each call claims a new key, runs an effect that returns at once, and records its result: two commits,
 * and the lease's renewal and give-up timers set and cleared. With the fsync off too: its own work.
 *
 *   node --import tsx bench/once-cost.ts [calls-per-round] [rounds]
 *
 * To see what a change costs, run it in a worktree of the commit before and in this one, alternating.
 */
import { join } from 'node:path';
import { benchCounts } from './args-support.ts';
import { codeMeasured, durableInsertFloor, fmt, median, openBenchRuntime, tempDir } from './support.ts';

const [CALLS, ROUNDS] = benchCounts([{ name: 'calls-per-round', fallback: 1000 }, { name: 'rounds', fallback: 9 }]) as [number, number];

type Case = { name: string; run(round: number): Promise<number> };

function floorCase(dir: string, synchronous: 'FULL' | 'OFF'): Case {
  const floor = durableInsertFloor(join(dir, `floor-${synchronous}.db`), synchronous);
  return { name: `one SQLite insert${synchronous === 'OFF' ? ', fsync off' : ''}`, run: async () => floor.msPerInsert(CALLS) };
}

function onceCase(dir: string, synchronous: 'FULL' | 'OFF'): Case {
  const runtime = openBenchRuntime(dir, `once-${synchronous}`);
  runtime.db.pragma(`synchronous = ${synchronous}`);
  return {
    name: `ctx.once, SQLite ledger${synchronous === 'OFF' ? ', fsync off' : ''}`,
    async run(round) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < CALLS; i++) await runtime.ledger.once(`r${round}/step-${i}`, { i }, async () => i);
      return Number(process.hrtime.bigint() - t0) / 1e6 / CALLS;
    },
  };
}

const { dir, cleanup } = tempDir();
try {
  const cases = [floorCase(dir, 'FULL'), onceCase(dir, 'FULL'), floorCase(dir, 'OFF'), onceCase(dir, 'OFF')];
  // One untimed round each: the files' first pages, the statements prepared.
  for (const c of cases) await c.run(-1);
  const times = cases.map(() => [] as number[]);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, c] of cases.entries()) times[i]!.push(await c.run(round));
  }
  const [floor, once, floorOff, onceOff] = times.map(median) as [number, number, number, number];
  console.log(`ctx.once on the SQLite ledger, ${CALLS} calls a round, median of ${ROUNDS} rounds; ${codeMeasured()}`);
  console.log(`  ${cases[0]!.name.padEnd(36)} ${fmt(floor * 1000)} us`);
  console.log(`  ${cases[1]!.name.padEnd(36)} ${fmt(once * 1000)} us   ${fmt(once / floor, 2)}x the insert`);
  console.log(`  ${cases[2]!.name.padEnd(36)} ${fmt(floorOff * 1000)} us`);
  console.log(`  ${cases[3]!.name.padEnd(36)} ${fmt(onceOff * 1000)} us   ${fmt(onceOff / floorOff, 2)}x the insert`);
} finally {
  cleanup();
}
