/**
 * One seeded schedule of real worker processes (`stepwise worker`) on one SQLite file, or on DynamoDB
 * Local and fauxqs (`--backend aws`, bench/chaos/process-backends.ts): several runs, two or three workers,
 * some of them running two or three steps at once (`--concurrency`),
 * SIGKILLs at random moments (inside model calls, `ctx.once`, long effects, commits), each killed worker
 * replaced; SIGSTOPs that freeze a worker past its visibility timeout and its effect's lease, so another
 * worker takes its step over, and SIGCONTs that bring it back to finish what it was doing (an effect, a
 * commit) against a run that moved on; on SQLite, a store brownout (the file locked by another
 * connection for a while); and steps of the wall clock, forward past the visibility timeout and the leases
 * or back by up to an hour (process-agent.ts): on SQLite the machine's, for every worker at once, on AWS one
 * worker's, each standing for a machine of its own. Half the steps' effects trust the ledger alone
 * (ledger-only.ts). Then the invariants. The kill and pause moments come from the seed; where in a step each
 * lands does not, so a replay repeats the schedule, not the exact interleaving.
 */
import Database from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { ScheduleReport } from './engine-schedule.ts';
import { checkInvariants, type RunExpectation } from './invariants.ts';
import { applicationsUnexplained, type Application, type Fault } from './ledger-only.ts';
import { openProcessBackend, type ProcessBackendKind } from './process-backends.ts';
import { rng } from './random.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';

/** The agent's default share of steps whose effect never returns on its first try. */
const DEFAULT_HANG_RATE = 0.08;

/**
 * The steps whose effect never returns on its first try: drawn from the seed (a stream of its own, so the
 * kills and pauses a seed gave stay the same), not in the worker, so a schedule asked for hangs has them
 * every time it is run (drawn there, a small schedule sometimes had none). At least one when a rate is
 * asked for.
 */
function hungKeys(seed: number, runIds: string[], steps: number, rate: number | undefined): string[] {
  const draw = rng(seed ^ 0x5bd1e995);
  const all = runIds.flatMap((runId) => Array.from({ length: steps }, (_, i) => idempotencyKey(runId, i + 1)));
  const keys = all.filter(() => draw.chance(rate ?? DEFAULT_HANG_RATE));
  return keys.length || rate === undefined ? keys : [draw.pick(all)];
}

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'bench/chaos/process-agent.ts');

/**
 * `sabotage: 'effect-ignores-key'` plants a defect the check must find: the agent's effect applies without
 * looking its key up, so every time a kill or a pause makes a step's effect run again, it counts twice.
 */
export async function processSchedule(
  seed: number,
  options: { timeoutMs?: number; backend?: ProcessBackendKind; sabotage?: 'effect-ignores-key'; hangRate?: number } = {},
): Promise<ScheduleReport> {
  const r = rng(seed);
  // Its own sequence, so the kills and pauses a seed gave before workers had a concurrency stay the same.
  const concurrencyOf = rng(seed ^ 0x2c1b3c6d);
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-chaos-proc-'));
  const backend = await openProcessBackend(options.backend ?? 'local', dir, seed);
  const effectsDb = join(dir, 'effects.db');
  // The steps of the wall clock come from a stream of their own, so the kills and pauses a seed gave stay.
  const stepper = rng(seed ^ 0x3c6ef372);
  // The machine's wall clock, one for all workers on SQLite (WAL keeps them on one machine). On AWS each
  // worker stands for a machine of its own, with a clock of its own (clockOf): one is stepped at a time.
  const clockFile = join(dir, 'clock-offset');
  let clockOffset = 0;
  const clockOf = new Map<ChildProcess, { file: string; offset: number }>();
  const steps = r.int(4, 8);
  const runs: RunExpectation[] = Array.from({ length: r.int(2, 4) }, (_, i) => ({ runId: `run-${i}`, steps, toolOf: () => 'write_row' }));
  const hangKeys = hungKeys(seed, runs.map((run) => run.runId), steps, options.hangRate);
  const report: ScheduleReport = {
    seed, runs: runs.length, steps: runs.length * steps, crashes: 0, crashesByPoint: {}, duplicates: 0, delayed: 0, brownouts: 0, slowWorkers: 0,
    longEffects: 0, modelFaults: 0, modelCalls: 0, staleWrites: 0, concurrentWorkers: 0, hungTools: 0, completed: 0, failed: 0, completedSteps: 0, blobsChecked: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, violations: [], unexpected: [],
  };
  // Warnings too: a worker back from a pause logs the stale write its run's version refused.
  const env = {
    ...process.env, CHAOS_EFFECTS_DB: effectsDb, CHAOS_STEPS: String(steps), STEPWISE_LOG_LEVEL: 'warn', STEPWISE_LOG_FORMAT: 'json',
    ...(options.sabotage ? { CHAOS_SABOTAGE: options.sabotage } : {}),
    CHAOS_HANG_KEYS: hangKeys.join(','),
    CHAOS_CLOCK_FILE: clockFile,
  };
  const cli = (args: string[], extra: Record<string, string> = {}) => spawn(process.execPath, [BIN, ...args, ...backend.args], { cwd: ROOT, env: { ...env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = (c: ChildProcess) => new Promise<void>((res) => (c.exitCode !== null || c.signalCode !== null ? res() : c.once('exit', () => res())));
  const alive = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;
  const workers: ChildProcess[] = [];
  /** Workers that printed their ready line: the only ones a kill or a pause is aimed at. */
  const ready = new Set<ChildProcess>();
  /** Workers stopped now, each with its SIGCONT timer. */
  const paused = new Map<ChildProcess, NodeJS.Timeout>();
  /** The kills, freezes and brownouts put on the workers and the store, in real time (ledger-only.ts). */
  const faults: Fault[] = [];
  const resume = (c: ChildProcess) => {
    clearTimeout(paused.get(c));
    paused.delete(c);
    if (alive(c)) c.kill('SIGCONT');
  };
  try {
    for (const run of runs) {
      const c = cli(['start', '--agent', AGENT, '--run-id', run.runId, '--goal', `write ${steps} rows`]);
      c.stdout!.resume(); c.stderr!.resume();
      await exited(c);
      if (c.exitCode !== 0) report.unexpected.push(`start ${run.runId} exited ${c.exitCode}`);
    }
    const spawnWorker = () => {
      // A stall window of 3 s: a run whose message was lost is re-driven by a worker's sweep (SQLite; on
      // AWS the sweeper is a function of the stack, and SQS counts visibility in whole seconds).
      const concurrency = concurrencyOf.pick([1, 1, 2, 3]);
      if (concurrency > 1) report.concurrentWorkers!++;
      // A worker that takes a killed one's place on AWS is a new machine, its clock right until stepped.
      const own = backend.kind === 'aws' ? { file: `${clockFile}-${workers.length}`, offset: 0 } : undefined;
      const c = cli(['worker', '--agent', AGENT, '--visibility-ms', backend.kind === 'local' ? '900' : '1000', '--stall-ms', '3000', '--concurrency', String(concurrency)],
        own ? { CHAOS_CLOCK_FILE: own.file } : {});
      if (own) clockOf.set(c, own);
      for (const input of [c.stdout!, c.stderr!]) {
        createInterface({ input }).on('line', (line) => {
          // Faults go to workers that are working: one still starting up has nothing to lose.
          if (/^worker \S+ ready: /.test(line)) {
            ready.add(c);
            // Read at its start, the offset may have stepped since: ready, it has the handler to read it again.
            if ((clockOf.get(c)?.offset ?? clockOffset) !== 0) c.kill('SIGUSR2');
          }
          if (line.includes('"event":"stale-write"')) report.staleWrites!++;
          // A worker that found times written before a step back, and counted them again from now.
          if (line.includes('"event":"clock-stepped-back"')) report.clockStepsSeen = (report.clockStepsSeen ?? 0) + 1;
        });
      }
      workers.push(c);
    };
    for (let i = 0, n = r.int(2, 3); i < n; i++) spawnWorker();

    const runIds = runs.map((run) => run.runId);
    const kills = r.int(3, 10);
    const pauses = r.int(2, 5);
    // Drawn up front, each at a turn of the loop below: how many turns a schedule lasts is up to its processes.
    // On AWS within the first ten turns: a step is for a worker at work, and these schedules end sooner.
    const clockSteps = Array.from({ length: stepper.int(0, 2) }, () => ({
      turn: stepper.int(1, backend.kind === 'aws' ? 10 : 25), ms: stepper.chance(0.6) ? stepper.int(2_000, 600_000) : -stepper.int(2_000, 3_600_000), done: false,
    }));
    report.clockSteps = 0;
    /** An offset written whole (renamed into place), for the agent's next reading. */
    const writeOffset = (file: string, offset: number) => {
      writeFileSync(`${file}.new`, String(offset));
      renameSync(`${file}.new`, file);
    };
    /**
     * A wall clock steps: on SQLite the machine's, every worker told; on AWS one ready worker's machine's,
     * as NTP or `date -s` steps one machine's, its neighbours' clocks left where they were. False while no
     * worker is ready to take it (on AWS): it is tried again at the next turn.
     */
    const stepClock = (ms: number): boolean => {
      // A stopped worker gets it when continued, as a frozen process reads the stepped clock when it runs.
      // Only those ready have the agent's handler: to one still loading, SIGUSR2 would be a kill.
      const told = workers.filter((w) => alive(w) && ready.has(w));
      if (backend.kind === 'aws') {
        if (!told.length) return false;
        const w = stepper.pick(told);
        const own = clockOf.get(w)!;
        own.offset += ms;
        writeOffset(own.file, own.offset);
        w.kill('SIGUSR2');
      } else {
        clockOffset += ms;
        writeOffset(clockFile, clockOffset);
        for (const w of told) w.kill('SIGUSR2');
      }
      report.clockSteps!++;
      return true;
    };
    const deadline = Date.now() + (options.timeoutMs ?? 120_000);
    for (let turn = 1; await backend.unfinished(runIds) > 0; turn++) {
      if (Date.now() > deadline) { report.unexpected.push(`runs not finished within ${options.timeoutMs ?? 120_000} ms`); break; }
      await new Promise((res) => setTimeout(res, 50 + r() * 400));
      for (const step of clockSteps) if (!step.done && step.turn <= turn) step.done = stepClock(step.ms);
      const killNext = report.crashes < kills && (report.slowWorkers >= pauses || r.chance(0.6));
      if (killNext) {
        // A stopped worker may be the one killed: a container killed while frozen.
        const live = workers.filter((w) => alive(w) && ready.has(w));
        const victim = live.length ? r.pick(live) : undefined;
        if (victim) { faults.push({ pid: victim.pid!, at: Date.now(), ms: 0 }); victim.kill('SIGKILL'); await exited(victim); resume(victim); report.crashes++; spawnWorker(); }
      } else if (report.slowWorkers < pauses) {
        // Frozen for 1.1-2.5 s: past the 0.9-1 s visibility timeout and the effect's 1 s lease, so its
        // delivery and its claim pass to another worker; then it runs on from where it stopped. Shorter
        // than the 10 s lock wait, so workers blocked behind a frozen commit wait for it rather than fail.
        const live = workers.filter((w) => alive(w) && ready.has(w) && !paused.has(w));
        const victim = live.length ? r.pick(live) : undefined;
        if (victim) {
          victim.kill('SIGSTOP');
          report.slowWorkers++;
          const ms = 1100 + r() * 1400;
          // On one SQLite file a worker stopped inside a commit holds the write lock: every worker's store
          // calls wait behind it, as in a brownout, so the freeze counts for all of them (ledger-only.ts).
          faults.push({ ...(backend.kind === 'aws' ? { pid: victim.pid! } : {}), at: Date.now(), ms });
          paused.set(victim, setTimeout(() => resume(victim), ms));
        }
      } else if (backend.brownout && report.brownouts === 0 && r.chance(0.3)) {
        // A brownout: another connection holds the write lock for a while; workers wait or fail and retry.
        report.brownouts++;
        const ms = 200 + r() * 1500;
        // Counted from before the lock is had, which may wait for a frozen worker's commit.
        const at = Date.now();
        await backend.brownout(ms);
        faults.push({ at, ms: Date.now() - at });
      }
    }
    report.crashesByPoint = { SIGKILL: report.crashes };
    // A stopped process would not act on the SIGTERM until continued.
    for (const w of [...paused.keys()]) resume(w);
    for (const w of workers) if (alive(w)) w.kill('SIGTERM');
    await Promise.all(workers.map(exited));
    // Deliveries beyond each message's first: redeliveries after a visibility timeout ran out (a killed or
    // frozen holder), each one a duplicate the version check and the ledger had to absorb.
    report.duplicates = backend.redeliveries?.() ?? 0;

    const effects = new Database(effectsDb, { readonly: true, fileMustExist: false });
    const rows = effects.prepare('SELECT key, times FROM applied').all() as { key: string; times: number }[];
    const count = (sql: string) => (effects.prepare(sql).get() as { n: number }).n;
    report.longEffects = count('SELECT count(*) AS n FROM long_effects');
    report.hungTools = count('SELECT count(*) AS n FROM hung_tools');
    report.modelCalls = count('SELECT count(*) AS n FROM model_calls');
    report.modelFaults = count('SELECT count(*) AS n FROM model_calls WHERE fault IS NOT NULL');
    // Ledger-only effects count every application: a second one the schedule's faults do not explain is the ledger's.
    const ledgerOnly = applicationsUnexplained(effects.prepare('SELECT key, pid, at FROM ledger_only').all() as Application[], faults);
    report.appliedAgainAfterFault = ledgerOnly.explained;
    report.ledgerOnlyEffects = ledgerOnly.times.size;
    effects.close();
    const applied = new Map(rows.map((row) => [row.key, ledgerOnly.times.get(row.key) ?? row.times]));
    const verdict = await checkInvariants({
      store: backend.store, runs, applied, blobs: backend.blobs,
      injected: (reason) => reason.includes('injected') || /started \d+ times without finishing/.test(reason),
    });
    Object.assign(report, {
      completed: verdict.completed, failed: verdict.failed, completedSteps: verdict.completedSteps, blobsChecked: verdict.blobsChecked,
      appliedTwice: verdict.appliedTwice, stepsLost: verdict.stepsLost, stuck: verdict.stuck, violations: verdict.violations,
    });
  } finally {
    for (const w of workers) if (alive(w)) w.kill('SIGKILL');
    for (const timer of paused.values()) clearTimeout(timer);
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return report;
}
