/**
 * One seeded schedule of real worker processes (`stepwise worker`) on one SQLite file: several runs, two
 * or three workers, SIGKILLs at random moments (inside model calls, `ctx.once`, long effects, commits),
 * each killed worker replaced, and a store brownout (the file locked by another connection for a while).
 * Then the invariants. The kill moments come from the seed; where in a step each lands does not, so a
 * replay repeats the schedule, not the exact interleaving.
 */
import Database from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import type { ScheduleReport } from './engine-schedule.ts';
import { checkInvariants, type RunExpectation } from './invariants.ts';
import { rng } from './random.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'bench/chaos/process-agent.ts');

export async function processSchedule(seed: number, options: { timeoutMs?: number } = {}): Promise<ScheduleReport> {
  const r = rng(seed);
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-chaos-proc-'));
  const dbPath = join(dir, 'stepwise.db');
  const effectsDb = join(dir, 'effects.db');
  const steps = r.int(4, 8);
  const runs: RunExpectation[] = Array.from({ length: r.int(2, 4) }, (_, i) => ({ runId: `run-${i}`, steps, toolOf: () => 'write_row' }));
  const report: ScheduleReport = {
    seed, runs: runs.length, steps: runs.length * steps, crashes: 0, crashesByPoint: {}, duplicates: 0, delayed: 0, brownouts: 0, slowWorkers: 0,
    longEffects: 0, modelFaults: 0, modelCalls: 0, completed: 0, failed: 0, completedSteps: 0, blobsChecked: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, violations: [], unexpected: [],
  };
  const env = { ...process.env, CHAOS_EFFECTS_DB: effectsDb, CHAOS_STEPS: String(steps), STEPWISE_LOG_LEVEL: 'error', STEPWISE_LOG_FORMAT: 'json' };
  const cli = (args: string[]) => spawn(process.execPath, [BIN, ...args, '--db', dbPath], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = (c: ChildProcess) => new Promise<void>((res) => (c.exitCode !== null || c.signalCode !== null ? res() : c.once('exit', () => res())));
  const workers: ChildProcess[] = [];
  try {
    for (const run of runs) {
      const c = cli(['start', '--agent', AGENT, '--run-id', run.runId, '--goal', `write ${steps} rows`]);
      c.stdout!.resume(); c.stderr!.resume();
      await exited(c);
      if (c.exitCode !== 0) report.unexpected.push(`start ${run.runId} exited ${c.exitCode}`);
    }
    const spawnWorker = () => {
      // A stall window of 3 s: a run whose message was lost is re-driven by a worker's sweep.
      const c = cli(['worker', '--agent', AGENT, '--visibility-ms', '900', '--stall-ms', '3000']);
      c.stdout!.resume(); c.stderr!.resume();
      workers.push(c);
    };
    for (let i = 0, n = r.int(2, 3); i < n; i++) spawnWorker();

    const runtime = openLocalRuntime({ dbPath });
    const running = () => (runtime.db.prepare("SELECT count(*) AS n FROM runs WHERE status IN ('running', 'waiting')").get() as { n: number }).n;
    const kills = r.int(3, 10);
    const deadline = Date.now() + (options.timeoutMs ?? 120_000);
    while (running() > 0) {
      if (Date.now() > deadline) { report.unexpected.push(`runs not finished within ${options.timeoutMs ?? 120_000} ms`); break; }
      await new Promise((res) => setTimeout(res, 50 + r() * 400));
      if (report.crashes < kills) {
        const live = workers.filter((w) => w.exitCode === null && w.signalCode === null);
        const victim = live.length ? r.pick(live) : undefined;
        if (victim) { victim.kill('SIGKILL'); await exited(victim); report.crashes++; spawnWorker(); }
      } else if (report.brownouts === 0 && r.chance(0.3)) {
        // A brownout: another connection holds the write lock for a while; workers wait or fail and retry.
        report.brownouts++;
        const lock = new Database(dbPath);
        lock.exec('BEGIN IMMEDIATE');
        await new Promise((res) => setTimeout(res, 200 + r() * 1500));
        lock.exec('ROLLBACK');
        lock.close();
      }
    }
    report.crashesByPoint = { SIGKILL: report.crashes };
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGTERM');
    await Promise.all(workers.map(exited));

    const effects = new Database(effectsDb, { readonly: true, fileMustExist: false });
    const rows = effects.prepare('SELECT key, times FROM applied').all() as { key: string; times: number }[];
    effects.close();
    const verdict = await checkInvariants({
      store: runtime.store, runs, applied: new Map(rows.map((row) => [row.key, row.times])), blobs: runtime.blobs,
      injected: (reason) => reason.includes('injected') || /started \d+ times without finishing/.test(reason),
    });
    Object.assign(report, {
      completed: verdict.completed, failed: verdict.failed, completedSteps: verdict.completedSteps, blobsChecked: verdict.blobsChecked,
      appliedTwice: verdict.appliedTwice, stepsLost: verdict.stepsLost, stuck: verdict.stuck, violations: verdict.violations,
    });
    runtime.close();
  } finally {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
  return report;
}
