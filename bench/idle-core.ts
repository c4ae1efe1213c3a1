/**
 * What the machine adds to every fsync when the core waiting for it has nothing else to run. The 500 B
 * figures of bench/langgraph.ts (the floor insert, stepwise's engine step and worker path, LangGraph's
 * two-node loop; each case in a process of its own), with every case's main thread pinned to one core:
 * first alone, then with an idle-priority spinner pinned to that core. The spinner (SCHED_IDLE) runs only
 * when nothing else on the core can, so it takes no time from the case; but while the case waits for an
 * fsync, its core runs the spinner instead of halting. On a virtual machine a halted core goes back to the
 * host, and the fsync's completion must wake it: a cost the insert and a step each pay once, and LangGraph's
 * step once per checkpoint it writes, before work that then runs on caches the host has cooled. Whether an
 * idle core halts at once is the guest's halt polling (haltpoll's guest_halt_poll_ns; this machine boots
 * with 0), printed above the figures (idlePolicy): where it polls, the two readings come out the same.
 *
 * The difference between the two readings is that cost. It belongs to the machine, not to either system,
 * and stepwise does not spin: a worker that kept a core busy would take it from every other process of a
 * shared machine (and a step's thread spinning while another thread fsyncs only moves the wake-up to that
 * thread: 31-68 us a step slower, bench/HISTORY.md).
 *
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/idle-core.ts [rounds] [pairs]
 *
 * Linux only, with taskset and chrt (util-linux); elsewhere it says why and measures nothing.
 */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { cannotPin, idlePolicy, idleSpinner, MAIN_THREAD_CORE_ENV } from './idle-core-support.ts';
import { benchCounts } from './args-support.ts';
import { fmt, median } from './support.ts';

const SIZE = 500;
const CHILD = '--child';

interface Reading { floorMs: number; engineMs: number; workerMs: number; langgraph2Ms: number }

/** The child: the 500 B figures of bench/langgraph.ts, each case in a process of its own, as one JSON line. */
async function child(rounds: number): Promise<void> {
  const { measure } = await import('./langgraph.ts');
  const [f] = await measure(rounds, { sizes: [SIZE], isolated: true });
  const reading: Reading = { floorMs: f!.floorMs, engineMs: f!.engineMs, workerMs: f!.workerMs, langgraph2Ms: f!.langgraph2Ms };
  console.log(JSON.stringify(reading));
}

/** One reading, its cases' main threads on `core`, with this process's Node options (the same compiled code). */
function reading(core: string, rounds: number): Reading {
  const r = spawnSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), CHILD, String(rounds)], {
    stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, [MAIN_THREAD_CORE_ENV]: core }, maxBuffer: 16 * 1024 * 1024,
  });
  const last = r.stdout.toString().trim().split('\n').pop() ?? '';
  if (r.status !== 0 || !last.startsWith('{')) throw new Error(`bench/idle-core.ts: the measuring process failed (${r.status ?? r.signal}): ${last}`);
  return JSON.parse(last) as Reading;
}

async function main(rounds: number, pairs: number): Promise<void> {
  const why = cannotPin();
  if (why) {
    console.log(`idle-core: not measured: ${why}`);
    return;
  }
  const core = String(cpus().length - 1);
  const alone: Reading[] = [];
  const busy: Reading[] = [];
  // Alternating, so a machine that drifts over the minutes drifts under both conditions.
  for (let pair = 0; pair < pairs; pair++) {
    alone.push(reading(core, rounds));
    const spinner = idleSpinner(core);
    try {
      busy.push(reading(core, rounds));
    } finally {
      spinner.kill('SIGKILL');
    }
  }
  console.log(`60-step loop at ${SIZE} B as in bench/langgraph.ts, each case in a process of its own, its main thread on core ${core} (of ${cpus().length}); median of ${rounds} rounds; ${pairs} readings each, alternating`);
  console.log(`idle cores: ${idlePolicy()}`);
  console.log(`${''.padEnd(38)}${'core idle in an fsync'.padEnd(28)}core kept busy (idle-priority spinner)`);
  const row = (label: string, pick: (r: Reading) => number, digits = 3, unit = ' ms') => {
    const values = (xs: Reading[]) => `${xs.map((r) => fmt(pick(r), digits)).join(' / ')}${unit}`;
    console.log(`  ${label.padEnd(36)}${values(alone).padEnd(28)}${values(busy)}`);
  };
  row('floor (one durable insert)', (r) => r.floorMs);
  row('stepwise engine step', (r) => r.engineMs);
  row('stepwise worker path', (r) => r.workerMs);
  row('LangGraph JS, agent + tools (sync)', (r) => r.langgraph2Ms);
  row('  over the engine step', (r) => r.langgraph2Ms / r.engineMs, 1, 'x');
  row('  over the worker path', (r) => r.langgraph2Ms / r.workerMs, 1, 'x');
  row('  in floors', (r) => r.langgraph2Ms / r.floorMs, 1, '');
  row('engine step in floors', (r) => r.engineMs / r.floorMs, 2, '');
  row('worker path in floors', (r) => r.workerMs / r.floorMs, 2, '');
  const cost = (pick: (r: Reading) => number) => fmt((median(alone.map(pick)) - median(busy.map(pick))) * 1000, 0);
  console.log(`what the idle core costs (medians of the readings, idle less busy): the insert ${cost((r) => r.floorMs)} us, the engine step ${cost((r) => r.engineMs)} us, the worker path ${cost((r) => r.workerMs)} us, LangGraph's step ${cost((r) => r.langgraph2Ms)} us`);
}

if (process.argv[2] === CHILD) await child(Number(process.argv[3]));
else if (import.meta.url === `file://${process.argv[1]}`) await main(...(benchCounts([{ name: 'rounds', fallback: 9 }, { name: 'pairs', fallback: 2 }]) as [number, number]));
