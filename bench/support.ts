import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../lib/agent.ts';
import { decodeState } from '../lib/core/codec.ts';
import { UnreadableCheckpointError } from '../lib/core/errors.ts';
import type { EngineDeps } from '../lib/engine/deps.ts';
import { runWorker } from '../lib/engine/worker-loop.ts';
import { silentLogger } from '../lib/log.ts';
import { openLocalRuntime, type LocalRuntime } from '../lib/local/runtime.ts';
import type { CheckpointStore, Model, ModelReply } from '../lib/ports.ts';
import { systemClock } from '../lib/ports.ts';

export function tempDir(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-bench-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A model that answers instantly: the engine's own cost is what is left. */
export function instantModel(tool: string, input: unknown = {}): Model {
  return { name: 'instant', decide: async (): Promise<ModelReply> => ({ kind: 'tool', tool, input }) };
}

/**
 * One no-op tool; `outputBytes` makes each step return that many bytes, different per step: `output`
 * makes them (default: the step number padded with one repeated letter).
 */
export function noopAgent(options: { sideEffect: boolean; outputBytes?: number; stepCap?: number; output?: (step: number, bytes: number) => string }): AgentDefinition {
  const output = options.output ?? ((step: number, bytes: number) => `step ${step} `.padEnd(bytes, 'o'));
  return defineAgent({
    name: 'bench', settings: { stepCap: options.stepCap ?? 1_000_000 },
    tools: [tool({ name: 'noop', description: 'does nothing', input: z.object({}), sideEffect: options.sideEffect, run: (_input, ctx) => (options.outputBytes ? output(ctx.step, options.outputBytes) : 'ok') })],
  });
}

export function benchDeps(runtime: LocalRuntime, agent: AgentDefinition, model: Model): EngineDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model, agent,
    clock: systemClock, workerId: 'bench', codeVersion: 'bench', log: silentLogger,
  };
}

/**
 * The whole worker path, driven by runWorker itself as `stepwise worker` drives it (its agent's consumer,
 * a heartbeat per delivery, the next delivery taken by the step's checkpoint where it can), for `steps`
 * steps of the one run on the queue: milliseconds per step. The loop's first receive is timed too.
 */
export async function workerPathMsPerStep(deps: EngineDeps, runtime: LocalRuntime, steps: number): Promise<number> {
  let done = 0;
  let t1 = 0n;
  const t0 = process.hrtime.bigint();
  await runWorker(deps, runtime.queue.forAgents([deps.agent.name]), {
    waitMs: 0, sweepEveryMs: 0,
    onHandled: (handled) => {
      if (handled.action !== 'ack' || handled.outcome?.kind !== 'advanced') throw new Error(`bench: a step was not advanced: ${JSON.stringify(handled)}`);
      if (++done < steps) return false;
      t1 = process.hrtime.bigint();
      return true;
    },
  });
  // The run's next message (handed back, or sent) goes, so that the next round's run is alone on the queue.
  for (const delivery of await runtime.queue.receive({ max: 100 })) await runtime.queue.ack(delivery);
  return Number(t1 - t0) / 1e6 / steps;
}

export function openBenchRuntime(dir: string, name: string): LocalRuntime {
  return openLocalRuntime({ dbPath: join(dir, `${name}.db`) });
}

/** The median of `xs`; none (a case that ran no round) is refused, where it was NaN printed as a figure. */
export const median = (xs: number[]): number => {
  if (!xs.length) throw new RangeError('median of no values: the case ran no round');
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

export const fmt = (n: number, digits = 1): string => n.toFixed(digits);

/** Whether this process runs lib/ from dist/ (bench/compiled.mjs), not the sources through tsx. */
export const compiledCode = (): boolean => import.meta.resolve('../lib/engine/advance.ts').endsWith('.js');

/**
 * Which stepwise code this process measures: the compiled dist/ (under bench/compiled.mjs, as
 * `npm run bench` runs every bench) or the TypeScript sources through tsx (a bench run on its own).
 */
export const codeMeasured = (): string => (compiledCode()
  ? 'code: lib/ compiled into dist/ (bench/compiled.mjs)'
  : 'code: the TypeScript sources through tsx (npm run build, then --import ./bench/compiled.mjs, for the compiled code)');

/** A database of its own for a bench case, as durable as the floor's: WAL, synchronous=FULL, `schema` run. */
export function durable(path: string, schema: string): Database.Database {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(schema);
  return db;
}

/**
 * The floor of a durable step: one row inserted and fsynced per transaction (WAL, synchronous=FULL), a
 * 500 B payload like a small checkpoint. Returns milliseconds per insert over `count` inserts.
 */
export function durableInsertFloor(dbPath: string, synchronous: 'FULL' | 'OFF' = 'FULL'): {
  /** Milliseconds per insert; with `work`, each insert comes after `work.microseconds` of it. */
  msPerInsert(count: number, work?: { microseconds: number; kind: WorkKind }): number;
  /** The work actually done before each insert of the last msPerInsert call, in microseconds (a few past what was asked). */
  lastWorkMicroseconds(): number;
  close(): void;
} {
  const db = new Database(dbPath);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous}`);
  db.exec('CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO t (payload) VALUES (?)');
  const payload = 'x'.repeat(500);
  let workNs = 0n;
  let inserts = 1;
  return {
    msPerInsert(count, work) {
      workNs = 0n;
      inserts = count;
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < count; i++) {
        if (work?.microseconds) workNs += (work.kind === 'allocating' ? allocatingWork : bareLoop)(work.microseconds);
        db.transaction(() => insert.run(payload))();
      }
      return Number(process.hrtime.bigint() - t0) / 1e6 / count;
    },
    lastWorkMicroseconds: () => Number(workNs) / 1e3 / inserts,
    close: () => db.close(),
  };
}

export type WorkKind = 'allocating' | 'bare';

/** One step record's worth of state: a unit of allocating work takes a few microseconds, so the loop stops close to its deadline. */
const WORK_UNIT = { step: 7, tool: 'noop', input: { table: 't7' }, result: { ok: true, text: 'step 7 '.padEnd(80, 'o') } };
let workSink = 0;

/**
 * JavaScript work for `microseconds` that allocates and serializes, as an engine step does (not a bare
 * loop). Returns the nanoseconds it took, a few microseconds past the deadline.
 */
export function allocatingWork(microseconds: number): bigint {
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(microseconds * 1000));
  let now = start;
  do {
    workSink += (JSON.parse(JSON.stringify(WORK_UNIT)) as typeof WORK_UNIT).step;
    now = process.hrtime.bigint();
  } while (now < end);
  return now - start;
}

/** A loop that only reads the clock for `microseconds`: time passes, nothing is allocated. Returns the nanoseconds it took. */
export function bareLoop(microseconds: number): bigint {
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(microseconds * 1000));
  let now = start;
  while (now < end) now = process.hrtime.bigint();
  return now - start;
}

/**
 * What a throughput figure must not hide: every run completed with exactly its steps, step n as the n-th
 * record, its checkpoint versions 1..latest with no gap.
 * Returns one line per problem; none when every step of every run is there once.
 */
export async function missingSteps(store: Pick<CheckpointStore, 'load' | 'history'>, runIds: readonly string[], steps: number): Promise<string[]> {
  const problems: string[] = [];
  for (const runId of runIds) {
    const stored = await store.load(runId);
    if (!stored) { problems.push(`${runId}: no checkpoint`); continue; }
    let state: ReturnType<typeof decodeState>;
    try {
      state = decodeState(stored);
    } catch (error) {
      // A record the head counts is gone: a lost checkpoint row takes its step's record with it.
      if (!(error instanceof UnreadableCheckpointError)) throw error;
      problems.push(`${runId}: ${error.message}`);
      continue;
    }
    if (state.status !== 'completed') problems.push(`${runId}: ${state.status} at step ${state.step}`);
    if (state.steps.length !== steps) problems.push(`${runId}: ${state.steps.length} of ${steps} steps`);
    state.steps.forEach((s, i) => { if (s.step !== i + 1) problems.push(`${runId}: record ${i + 1} is step ${s.step}`); });
    const versions = (await store.history(runId)).map((h) => h.version);
    if (versions.some((v, i) => v !== i + 1) || versions.at(-1) !== stored.version) problems.push(`${runId}: versions ${versions.join(',')} (latest ${stored.version})`);
  }
  return problems;
}
