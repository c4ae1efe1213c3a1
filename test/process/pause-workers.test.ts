import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise, type Running } from '../support/processes.ts';
import { latestStep } from '../support/local-records.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const ROWS = 6;
/** The step whose effect the first worker is stopped in the middle of. */
const HELD = 3;
const KEY = `run-0/step-${HELD}`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, probe: () => T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * The pattern's other failure, on real processes: a worker frozen by SIGSTOP (a stopped container, a long
 * GC pause) in the middle of a side effect, for longer than its delivery's visibility timeout and its
 * claim's lease, while another worker takes the step over and finishes it; then SIGCONT, and the frozen
 * worker runs on from where it stopped, against a run that has moved on.
 */
describe('a real worker process stopped with SIGSTOP inside an effect and continued after another took over', () => {
  let db: ReturnType<typeof tempDb>;
  const workers: Running[] = [];
  afterEach(() => { for (const w of workers) w.child.kill('SIGKILL'); db?.cleanup(); });

  it('loses its claim and its delivery, applies nothing twice, and its late checkpoint is refused', async () => {
    db = tempDb();
    const effectsDb = db.path.replace(/stepwise\.db$/, 'effects.db');
    const env = {
      ...process.env, EFFECTS_DB: effectsDb, PROCESS_AGENT_ROWS: String(ROWS),
      // The effect inside ctx.once with a 1 s lease; step 3's effect holds 2 s before it writes.
      PROCESS_AGENT_ONCE_LEASE_MS: '1000', PROCESS_AGENT_HOLD_AT: String(HELD), PROCESS_AGENT_HOLD_MS: '2000',
      STEPWISE_LOG_LEVEL: 'warn', STEPWISE_LOG_FORMAT: 'json',
    };
    expect((await stepwiseCli(['start', '--agent', AGENT, '--run-id', 'run-0', '--goal', `write ${ROWS} rows`, '--db', db.path], env)).code).toBe(0);

    const worker = () => {
      const w = runStepwise(['worker', '--agent', AGENT, '--visibility-ms', '800', '--db', db.path], env);
      workers.push(w);
      return w;
    };
    const first = worker();
    /** A read of the agent's effects database; `none` until a worker has made its file and tables. */
    const readEffects = <T,>(read: (d: Database.Database) => T, none: T): T => {
      if (!existsSync(effectsDb)) return none;
      const d = new Database(effectsDb, { readonly: true });
      try {
        return read(d);
      } catch {
        return none; // the tables are not made yet
      } finally {
        d.close();
      }
    };
    const callsOf = (key: string) => readEffects((d) => (d.prepare('SELECT pid FROM received WHERE key = ? ORDER BY id').all(key) as { pid: number }[]).map((r) => r.pid), []);
    const appliedRows = () => readEffects((d) => d.prepare('SELECT key, row FROM applied ORDER BY row').all() as { key: string; row: number }[], []);
    // Stopped inside step 3's effect: after it claimed the key and logged the call, before it writes.
    await until('the first worker inside the held effect', () => (callsOf(KEY).length ? true : undefined));
    first.child.kill('SIGSTOP');
    expect(callsOf(KEY)).toEqual([first.child.pid]);
    expect(appliedRows().map((r) => r.key), 'stopped before its write').not.toContain(KEY);

    const runtime = openLocalRuntime({ dbPath: db.path });
    const stepOf = () => latestStep(runtime.db, 'run-0')!;
    expect(stepOf()).toBe(HELD - 1);
    const second = worker();
    // The second worker gets the redelivery once the visibility runs out, waits for the claim's lease,
    // runs the effect itself and commits the step, all while the first is stopped.
    await until('the second worker to commit the held step', () => (stepOf() >= HELD ? true : undefined));
    expect(callsOf(KEY)).toEqual([first.child.pid, second.child.pid]);

    first.child.kill('SIGCONT');
    await until('the run to complete', () => {
      const { status } = runtime.db.prepare("SELECT status FROM runs WHERE run_id = 'run-0'").get() as { status: string };
      return status === 'completed' ? true : undefined;
    }, 60_000);
    // The first worker, back, finishes its effect (the key was written already, so it writes nothing) and
    // then tries to commit the step it had loaded: refused.
    const staleWrite = await until('the first worker to log its refused checkpoint', () => (first.out() + first.err()).split('\n')
      .filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as { event?: string; runId?: string; version?: number })
      .find((e) => e.event === 'stale-write' && e.runId === 'run-0'));
    // Refused at the version it had loaded, the one before the held step's checkpoint.
    const history = await runtime.store.history('run-0');
    const heldStep = history.find((h) => h.step === HELD && h.tool === 'write_row')!;
    expect(staleWrite.version).toBe(heldStep.version - 1);
    expect(heldStep.workerId).not.toBe(history.find((h) => h.step === HELD - 1 && h.tool)!.workerId);

    await Promise.all([first.stop(), second.stop()]);

    // Each effect applied once; the held step's applied by the second worker, and its record says so.
    expect(appliedRows()).toEqual(Array.from({ length: ROWS }, (_, i) => ({ key: `run-0/step-${i + 1}`, row: i + 1 })));
    const state = decodeState((await runtime.store.load('run-0'))!);
    expect(state.status).toBe('completed');
    expect(state.steps.map((s) => s.step)).toEqual(Array.from({ length: ROWS }, (_, i) => i + 1));
    expect(state.steps[HELD - 1]!.result.text).toContain('"applied":true');
    expect(history.map((h) => h.version)).toEqual(history.map((_, i) => i + 1));
    // The key's one result on record is the one the step recorded.
    const ledger = runtime.db.prepare('SELECT status, result FROM ledger WHERE key = ?').get(KEY) as { status: string; result: string };
    expect(ledger.status).toBe('completed');
    expect(JSON.parse(ledger.result)).toEqual({ applied: true });
    runtime.close();
  }, 90_000);
});
