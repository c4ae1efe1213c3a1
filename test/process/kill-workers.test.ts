import Database from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const RUNS = 3;
const ROWS = 12;
const KILLS = 10;

/** A small seeded generator, so a failing schedule of kills can be replayed from the printed seed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => { s = (s + 0x6d2b79f5) >>> 0; let t = s; t = Math.imul(t ^ (t >>> 15), t | 1); t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}

describe('real worker processes, killed with SIGKILL at random moments', () => {
  let db: ReturnType<typeof tempDb>;
  const children = new Set<ChildProcess>();
  afterEach(() => { for (const c of children) c.kill('SIGKILL'); db?.cleanup(); });

  it(`${RUNS} runs of ${ROWS} steps each finish with every effect applied exactly once and dense histories`, async () => {
    db = tempDb();
    const effectsDb = db.path.replace(/stepwise\.db$/, 'effects.db');
    const seed = Number(process.env.KILL_SEED ?? Date.now() % 100_000);
    const rand = random(seed);
    // The runs' last steps wait at the gate until every kill is done: faster steps must not end the runs first.
    const gate = db.path.replace(/stepwise\.db$/, 'gate');
    const env = { ...process.env, EFFECTS_DB: effectsDb, PROCESS_AGENT_ROWS: String(ROWS), PROCESS_AGENT_GATE: gate, STEPWISE_LOG_LEVEL: 'warn' };
    const cli = (args: string[]) => spawn(process.execPath, [BIN, ...args, '--db', db.path], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = (c: ChildProcess) => new Promise<number | null>((r) => (c.exitCode !== null ? r(c.exitCode) : c.on('exit', r)));

    for (let i = 0; i < RUNS; i++) {
      const c = cli(['start', '--agent', AGENT, '--run-id', `run-${i}`, '--goal', `write ${ROWS} rows`]);
      expect(await exited(c)).toBe(0);
    }
    const workers: ChildProcess[] = [];
    // Kills go to workers that printed their ready line: one still starting up holds nothing to lose.
    const ready = new Set<ChildProcess>();
    let spawned = 0;
    const spawnWorker = () => {
      // Every other worker runs three steps at once (--concurrency): a kill then lands in several steps.
      const c = cli(['worker', '--agent', AGENT, '--visibility-ms', '800', ...(spawned++ % 2 ? ['--concurrency', '3'] : [])]);
      createInterface({ input: c.stdout! }).on('line', (line) => { if (/^worker \S+ ready: /.test(line)) ready.add(c); });
      c.stderr!.resume();
      children.add(c); workers.push(c);
    };
    spawnWorker(); spawnWorker();

    const runtime = openLocalRuntime({ dbPath: db.path });
    const allDone = () => (runtime.db.prepare("SELECT count(*) AS n FROM runs WHERE status = 'running'").get() as { n: number }).n === 0;
    let kills = 0;
    const deadline = Date.now() + 90_000;
    while (!allDone()) {
      expect(Date.now(), `runs did not finish (seed ${seed})`).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 100 + rand() * 400));
      if (kills < KILLS) {
        const live = workers.filter((w) => w.exitCode === null && w.signalCode === null && ready.has(w));
        const victim = live[Math.floor(rand() * live.length)];
        if (victim) { victim.kill('SIGKILL'); await exited(victim); kills++; spawnWorker(); }
        if (kills === KILLS) writeFileSync(gate, '');
      }
    }
    for (const w of workers) w.kill('SIGTERM');

    const effects = new Database(effectsDb, { readonly: true });
    const applied = effects.prepare('SELECT key FROM applied ORDER BY key').all() as { key: string }[];
    const received = effects.prepare('SELECT key, count(*) AS n FROM received GROUP BY key').all() as { key: string; n: number }[];
    effects.close();
    const expectedKeys = Array.from({ length: RUNS }, (_, r) => Array.from({ length: ROWS }, (_, s) => `run-${r}/step-${s + 1}`)).flat().sort();
    expect(applied.map((a) => a.key), `seed ${seed}`).toEqual(expectedKeys);
    expect(received.map((r) => r.key).sort()).toEqual(expectedKeys);

    for (let r = 0; r < RUNS; r++) {
      const state = decodeState((await runtime.store.load(`run-${r}`))!);
      expect(state.status, `seed ${seed}`).toBe('completed');
      expect(state.steps.map((s) => s.step)).toEqual(Array.from({ length: ROWS }, (_, i) => i + 1));
      expect(state.steps.map((s) => s.input)).toEqual(Array.from({ length: ROWS }, (_, i) => ({ row: i + 1 })));
      const history = await runtime.store.history(`run-${r}`);
      expect(history.map((h) => h.version)).toEqual(history.map((_, i) => i + 1));
      const steps = history.map((h) => h.step);
      for (let i = 1; i < steps.length; i++) expect(steps[i]! - steps[i - 1]!).toBeGreaterThanOrEqual(0);
      expect(new Set(history.filter((h) => h.tool).map((h) => h.step)).size).toBe(ROWS);
    }
    runtime.close();
    expect(kills).toBe(KILLS);
  }, 120_000);
});
