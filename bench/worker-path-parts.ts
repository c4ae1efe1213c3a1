/**
 * What the whole worker path adds to the engine step, part by part, in the 60-step loop of
 * bench/langgraph.ts (500 B outputs by default): the worker's start, the run's first receive, the first
 * step, and each later step, next to the engine step's first and later steps. Both in this one process,
 * each on a file of its own, rounds alternating between them, so a slow moment of the machine hits both.
 * The worker path is runWorker as `stepwise worker` runs it, started for each run as langgraph.ts does.
 *
 *   node --import tsx bench/worker-path-parts.ts [rounds] [output-bytes]
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/worker-path-parts.ts [rounds] [output-bytes]   (the compiled code)
 *
 * STEPWISE_BENCH_FSYNC=off times the same with the fsync off (synchronous=OFF): the parts' own work.
 */
import { join } from 'node:path';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { runWorker } from '../lib/engine/worker-loop.ts';
import type { RunQueueConsumer } from '../lib/ports.ts';
import { benchCounts } from './args-support.ts';
import { cachedQueryOutput } from './query-output.ts';
import { benchDeps, codeMeasured, fmt, instantModel, median, noopAgent, openBenchRuntime, tempDir } from './support.ts';

const STEPS = 60;
const [ROUNDS, BYTES] = benchCounts([{ name: 'rounds', fallback: 40 }, { name: 'output-bytes', fallback: 500, least: 0 }]) as [number, number];
const WARM_ROUNDS = 10;
const fsyncOff = process.env.STEPWISE_BENCH_FSYNC === 'off';

const us = (from: bigint, to: bigint) => Number(to - from) / 1e3;
const parts = new Map<string, number[]>();
const record = (name: string, value: number) => {
  let values = parts.get(name);
  if (!values) parts.set(name, (values = []));
  values.push(value);
};

const { dir, cleanup } = tempDir();
const open = (name: string) => {
  const runtime = openBenchRuntime(dir, name);
  if (fsyncOff) runtime.db.pragma('synchronous = OFF');
  return { runtime, deps: benchDeps(runtime, noopAgent({ sideEffect: false, outputBytes: BYTES, stepCap: STEPS + 1, output: cachedQueryOutput }), instantModel('noop')) };
};
const worker = open('worker');
const engine = open('engine');

async function workerRound(round: number): Promise<void> {
  const { runtime, deps } = worker;
  await startRun(deps, { goal: 'do 60 steps', runId: `w${round}` });
  const queue = runtime.queue.forAgents([deps.agent.name]);
  // The same consumer, with its receive timed: when the loop asked, and when the run's message came.
  let asked = 0n;
  let received = 0n;
  const consumer: RunQueueConsumer = Object.create(queue);
  consumer.receive = async (options) => {
    asked = process.hrtime.bigint();
    const deliveries = await queue.receive(options);
    received = process.hrtime.bigint();
    return deliveries;
  };
  const handled: bigint[] = [];
  const start = process.hrtime.bigint();
  await runWorker(deps, consumer, {
    waitMs: 0, sweepEveryMs: 0,
    onHandled: (outcome) => {
      if (outcome.action !== 'ack' || outcome.outcome?.kind !== 'advanced') throw new Error(`bench: a step was not advanced: ${JSON.stringify(outcome)}`);
      handled.push(process.hrtime.bigint());
      return handled.length >= STEPS;
    },
  });
  // The run's next message goes, so that the next round's run is alone on the queue.
  for (const delivery of await runtime.queue.receive({ max: 100 })) await runtime.queue.ack(delivery);
  if (round < WARM_ROUNDS) return;
  record('worker: its start, to the first receive', us(start, asked));
  record('worker: the run\'s first receive', us(asked, received));
  record('worker: the first step', us(received, handled[0]!));
  record('worker: each of steps 10-60', us(handled[8]!, handled[STEPS - 1]!) / (STEPS - 9));
  record('worker: the whole run, per step', us(start, handled[STEPS - 1]!) / STEPS);
}

async function engineRound(round: number): Promise<void> {
  const { deps } = engine;
  const runId = `e${round}`;
  await startRun(deps, { goal: 'do 60 steps', runId });
  const done: bigint[] = [process.hrtime.bigint()];
  for (let i = 0; i < STEPS; i++) {
    await advance(deps, runId);
    done.push(process.hrtime.bigint());
  }
  if (round < WARM_ROUNDS) return;
  record('engine: the first step', us(done[0]!, done[1]!));
  record('engine: each of steps 10-60', us(done[9]!, done[STEPS]!) / (STEPS - 9));
  record('engine: the whole run, per step', us(done[0]!, done[STEPS]!) / STEPS);
}

for (let round = 0; round < WARM_ROUNDS + ROUNDS; round++) {
  // Alternating which goes first, so neither always runs right after the other's garbage.
  if (round % 2) { await workerRound(round); await engineRound(round); } else { await engineRound(round); await workerRound(round); }
}
worker.runtime.close();
engine.runtime.close();
cleanup();

const of = (name: string) => median(parts.get(name)!);
console.log(`the worker path and the engine step, part by part: ${STEPS}-step runs, ${BYTES} B outputs, median of ${ROUNDS} rounds, SQLite WAL + synchronous=${fsyncOff ? 'OFF' : 'FULL'}; ${codeMeasured()}`);
for (const [name, values] of parts) console.log(`  ${name.padEnd(44)} ${fmt(median(values)).padStart(8)} us`);
const perRun = of('worker: its start, to the first receive') + of('worker: the run\'s first receive') + of('worker: the first step') - of('engine: the first step');
console.log(`the worker path adds ${fmt(perRun, 0)} us a run (${fmt(perRun / STEPS)} us a step over ${STEPS} steps) and ${fmt(of('worker: each of steps 10-60') - of('engine: each of steps 10-60'))} us to each later step; the whole run, ${fmt(of('worker: the whole run, per step') - of('engine: the whole run, per step'))} us a step`);
