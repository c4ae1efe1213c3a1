/**
 * Per-step overhead of the engine on the embedded SQLite store, against the floor: one durable SQLite
 * insert (WAL, synchronous=FULL) per transaction, measured in the same run, interleaved round by round
 * so machine drift hits both alike. Stub model, no-op tool: what is left is the engine and its writes.
 *
 *   node --import tsx bench/step-overhead.ts [steps-per-round] [rounds]
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/step-overhead.ts [steps-per-round] [rounds]   (the compiled code, as npm run bench runs it)
 */
import { join } from 'node:path';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { benchCounts } from './args-support.ts';
import { benchDeps, codeMeasured, durableInsertFloor, fmt, instantModel, median, noopAgent, openBenchRuntime, tempDir, workerPathMsPerStep, type WorkKind } from './support.ts';

const [STEPS, ROUNDS] = benchCounts([{ name: 'steps-per-round', fallback: 300 }, { name: 'rounds', fallback: 9 }]) as [number, number];

/** `work`: the microseconds of work a case really did before each insert in its last round. */
type Case = { name: string; run(round: number): Promise<number>; work?: () => number };

/** The floor: one row inserted and fsynced per transaction, 500 B payload like a small checkpoint. */
function floorCase(dir: string): Case {
  const floor = durableInsertFloor(join(dir, 'floor.db'));
  return { name: 'floor: one durable SQLite insert', run: async () => floor.msPerInsert(STEPS) };
}

/**
 * The same insert, each after `microseconds()` of JavaScript work: `allocating` builds, serializes and parses
 * objects as an engine step does; `bare` only reads the clock. The work's own time is measured (it stops a
 * few microseconds past what it was asked), so what the insert costs after it is the difference.
 */
function floorAfterWorkCase(dir: string, name: string, kind: WorkKind, microseconds: () => number): Case {
  const floor = durableInsertFloor(join(dir, `floor-${name.replace(/\W+/g, '-')}.db`));
  return { name, run: async () => floor.msPerInsert(STEPS, { microseconds: microseconds(), kind }), work: () => floor.lastWorkMicroseconds() };
}

/** The insert with the fsync off: its own work, which the engine step's work above already includes once. */
function floorWithoutFsyncCase(dir: string): Case {
  const floor = durableInsertFloor(join(dir, 'floor-nosync.db'), 'OFF');
  return { name: 'one SQLite insert, fsync off', run: async () => floor.msPerInsert(STEPS) };
}

/**
 * advance() in a loop: load, model, tool, checkpoint. `fsyncOff` (synchronous=OFF): the step's own work,
 * CPU and writes, without the disk's wait.
 */
function engineCase(dir: string, sideEffect: boolean, fsyncOff = false): Case {
  const runtime = openBenchRuntime(dir, `engine-${sideEffect}${fsyncOff ? '-nosync' : ''}`);
  if (fsyncOff) runtime.db.pragma('synchronous = OFF');
  const deps = benchDeps(runtime, noopAgent({ sideEffect }), instantModel('noop'));
  return {
    name: `${sideEffect ? 'engine step, side-effecting tool (decision recorded)' : 'engine step, read-only tool'}${fsyncOff ? ', fsync off' : ''}`,
    async run(round) {
      const runId = `r${round}`;
      await startRun(deps, { goal: 'bench', runId });
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < STEPS; i++) await advance(deps, runId);
      return Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;
    },
  };
}

/** Where a step's time goes, in the order a step spends it: each phase ends where the next begins. */
const PHASES = ['before the load', 'load', 'decode + prompt', 'model (stub)', 'input check + decision', 'tool (no-op)', 'record + next state', 'commit', 'after the commit'] as const;
type Phase = (typeof PHASES)[number];

/**
 * The engine step again, its phases timed: the store's load and commit, the model's decide and the tool's
 * run are wrapped to mark where each begins and ends. A case of its own, so the wrappers' own cost (a clock
 * read a phase) stays out of the figures above; `phases()`: microseconds per step by phase, in its last
 * round. With the fsync on as well as off: the same work, timed right after each fsync's wait.
 */
function phasedEngineCase(dir: string, fsyncOff: boolean): Case & { phases(): number[] } {
  const runtime = openBenchRuntime(dir, `engine-phases${fsyncOff ? '-nosync' : ''}`);
  if (fsyncOff) runtime.db.pragma('synchronous = OFF');
  const agent = noopAgent({ sideEffect: false });
  const model = instantModel('noop');
  const spent = new Array<bigint>(PHASES.length).fill(0n);
  let mark = 0n;
  /** The time since the last mark, to the phase that just ended. */
  const lap = (ended: Phase) => { const t = process.hrtime.bigint(); spent[PHASES.indexOf(ended)]! += t - mark; mark = t; };
  const around = <A extends unknown[], R>(f: (...a: A) => R | Promise<R>, before: Phase, during: Phase) => async (...a: A): Promise<R> => {
    lap(before);
    try { return await f(...a); } finally { lap(during); }
  };
  const tool = agent.tools[0]!;
  tool.run = around(tool.run.bind(tool), 'input check + decision', 'tool (no-op)');
  model.decide = around(model.decide.bind(model), 'decode + prompt', 'model (stub)');
  const store = runtime.store;
  store.load = around(store.load.bind(store), 'before the load', 'load');
  store.commit = around(store.commit.bind(store), 'record + next state', 'commit');
  const deps = benchDeps(runtime, agent, model);
  return {
    name: `engine step, read-only tool${fsyncOff ? ', fsync off' : ''}, timed by phase`,
    async run(round) {
      const runId = `p${fsyncOff ? 'n' : ''}${round}`;
      await startRun(deps, { goal: 'bench', runId });
      spent.fill(0n);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < STEPS; i++) {
        mark = process.hrtime.bigint();
        await advance(deps, runId);
        lap('after the commit');
      }
      return Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;
    },
    phases: () => spent.map((ns) => Number(ns) / 1e3 / STEPS),
  };
}

/**
 * The whole worker path per step, as runWorker does it: receive, advance, send, ack; on this runtime the
 * step's checkpoint does the send, the ack and the next receive in its transaction. `fsyncOff`: its own
 * work, with its store's commit timed (the checkpoint with the queue's ack, send and receive in it), to
 * set against the engine step's; `commitUs()`: microseconds per step in its commits, in the last round.
 */
function workerCase(dir: string, fsyncOff = false): Case & { commitUs(): number } {
  const runtime = openBenchRuntime(dir, `worker${fsyncOff ? '-nosync' : ''}`);
  if (fsyncOff) runtime.db.pragma('synchronous = OFF');
  const store = runtime.store;
  let spent = 0n;
  if (fsyncOff) {
    const commit = store.commit.bind(store);
    store.commit = async (write) => {
      const t0 = process.hrtime.bigint();
      try { return await commit(write); } finally { spent += process.hrtime.bigint() - t0; }
    };
  }
  const deps = benchDeps(runtime, noopAgent({ sideEffect: false }), instantModel('noop'));
  return {
    name: fsyncOff ? 'worker step, fsync off' : 'worker step: runWorker (receive + step + send + ack)',
    async run(round) {
      const runId = `w${fsyncOff ? 'n' : ''}${round}`;
      await startRun(deps, { goal: 'bench', runId });
      spent = 0n;
      return workerPathMsPerStep(deps, runtime, STEPS);
    },
    commitUs: () => Number(spent) / 1e3 / STEPS,
  };
}

async function main(): Promise<void> {
  const { dir, cleanup } = tempDir();
  try {
    const results = new Map<string, number[]>();
    const latest = (name: string): number => results.get(name)?.at(-1) ?? 0;
    const engineOff = engineCase(dir, false, true);
    const insertOff = floorWithoutFsyncCase(dir);
    const phased = phasedEngineCase(dir, true);
    const phases: number[][] = [];
    const phasedSync = phasedEngineCase(dir, false);
    const phasesSync: number[][] = [];
    const workerOff = workerCase(dir, true);
    const workerCommits: number[] = [];
    // The engine step's work beyond the insert's own, in this round (measured just before: the cases run in order).
    const engineWork = () => Math.max(0, (latest(engineOff.name) - latest(insertOff.name)) * 1000);
    const cases = [
      floorCase(dir), engineCase(dir, false), engineCase(dir, true), workerCase(dir),
      engineOff, insertOff, phased, phasedSync, workerOff,
      floorAfterWorkCase(dir, 'floor after 25 us of allocating JavaScript work', 'allocating', () => 25),
      floorAfterWorkCase(dir, 'floor after 100 us of allocating JavaScript work', 'allocating', () => 100),
      floorAfterWorkCase(dir, 'floor after 100 us of a bare loop (no allocation)', 'bare', () => 100),
      floorAfterWorkCase(dir, "floor after the engine step's own work (fsync off, less the insert's)", 'allocating', engineWork),
    ];
    const work = new Map<string, number[]>();
    for (const c of cases) results.set(c.name, []);
    for (let round = 0; round <= ROUNDS; round++) {
      for (const c of cases) {
        const ms = await c.run(round);
        // Round 0 warms caches and the JIT: dropped.
        if (round) results.get(c.name)!.push(ms);
        if (round && c.work) work.set(c.name, [...work.get(c.name) ?? [], c.work()]);
        if (round && c === phased) phases.push(phased.phases());
        if (round && c === phasedSync) phasesSync.push(phasedSync.phases());
        if (round && c === workerOff) workerCommits.push(workerOff.commitUs());
      }
    }
    const floor = median(results.get(cases[0]!.name)!);
    console.log(`per-step time, ${STEPS} steps x ${ROUNDS} rounds (median of rounds), SQLite WAL + synchronous=FULL`+ `; ${codeMeasured()}`);
    console.log('case'.padEnd(70), 'ms/step'.padStart(8), 'x floor'.padStart(8), 'min..max'.padStart(14), '  work done before each insert');
    for (const c of cases) {
      const xs = results.get(c.name)!;
      const done = work.get(c.name);
      // What the insert itself took after the work: the case's time less the work's own measured time.
      const insert = done ? `  ${fmt(median(done), 0)} us; the insert after it ${fmt(median(xs) - median(done) / 1000, 3)} ms` : '';
      console.log(c.name.padEnd(70), fmt(median(xs), 3).padStart(8), fmt(median(xs) / floor, 2).padStart(8), `${fmt(Math.min(...xs), 3)}..${fmt(Math.max(...xs), 3)}`.padStart(14), insert);
    }
    const engine = median(results.get(cases[1]!.name)!);
    const last = cases.at(-1)!.name;
    const afterWork = median(results.get(last)!);
    const engineWorkUs = (median(results.get(engineOff.name)!) - median(results.get(insertOff.name)!)) * 1000;
    console.log(`the read-only engine step does ${fmt(engineWorkUs, 0)} us of work beyond the insert's (fsync off); one durable insert after ${fmt(median(work.get(last)!), 0)} us`
      + ` of work takes ${fmt(afterWork, 3)} ms, ${fmt(afterWork / floor, 2)}x the tight-loop floor: the engine step is ${fmt(engine / afterWork, 2)}x that`
      + ' (its pages are the insert\'s, bench/step-pages.ts: the rest is its own work taking longer after an fsync, below)');
    const byPhase = PHASES.map((_, i) => median(phases.map((round) => round[i]!)));
    console.log(`where the fsync-off step's ${fmt(byPhase.reduce((a, b) => a + b, 0), 0)} us go (median of rounds, us/step; one fsync-off insert: ${fmt(median(results.get(insertOff.name)!) * 1000, 0)} us): `
      + PHASES.map((name, i) => `${name} ${fmt(byPhase[i]!, 1)}`).join(', '));
    const byPhaseSync = PHASES.map((_, i) => median(phasesSync.map((round) => round[i]!)));
    const commit = PHASES.indexOf('commit');
    const outside = (xs: number[]) => xs.reduce((a, b, i) => a + (i === commit ? 0 : b), 0);
    console.log(`the same phases with the fsync on: ${PHASES.map((name, i) => `${name} ${fmt(byPhaseSync[i]!, 1)}`).join(', ')};`
      + ` the work outside the commit takes ${fmt(outside(byPhaseSync), 0)} us after an fsync against ${fmt(outside(byPhase), 0)} us without (${fmt(outside(byPhaseSync) / outside(byPhase), 2)}x),`
      + ` the commit ${fmt(byPhaseSync[commit]!, 0)} us against ${fmt(byPhase[commit]!, 0)} us plus the floor's fsync wait (${fmt((floor - median(results.get(insertOff.name)!)) * 1000, 0)} us)`);
    const workerOffUs = median(results.get(workerOff.name)!) * 1000;
    console.log(`the worker path with the fsync off: ${fmt(workerOffUs, 0)} us a step, ${fmt(workerOffUs - median(results.get(engineOff.name)!) * 1000, 0)} more than the engine step's;`
      + ` its commit (with the queue's ack, send and receive) ${fmt(median(workerCommits), 0)} us, the engine step's ${fmt(byPhase[PHASES.indexOf('commit')]!, 0)} us`);
  } finally {
    cleanup();
  }
}

await main();
