import Database from 'better-sqlite3';
import { once } from 'node:events';
import { copyFileSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
const EFFECTS = db.path.replace(/stepwise\.db$/, 'effects.db');
afterAll(() => db.cleanup());
// Each run's last step waits for GATE: every backup is taken with the runs still moving, however fast the
// worker is (a backup's own process may take a second to start, in which the runs once all finished).
const GATE = db.path.replace(/stepwise\.db$/, 'gate');
const ENV = { STEPWISE_DB: db.path, EFFECTS_DB: EFFECTS, PROCESS_AGENT_ROWS: '30', PROCESS_AGENT_GATE: GATE, STEPWISE_LOG_FORMAT: 'json' };
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * What a backup taken mid-step must not hold: damage (a copy of the file, then of its -wal, while a
 * worker writes, can pair a -wal with a file from before its last checkpoint), or a run whose versions
 * have a gap. The runs listed are those out of order.
 */
function faults(path: string): string[] {
  const file = new Database(path, { readonly: true });
  try {
    const check = file.pragma('integrity_check', { simple: true });
    if (check !== 'ok') return [String(check)];
    return (file.prepare(`SELECT run_id AS runId FROM checkpoints GROUP BY run_id
      HAVING max(version) - min(version) + 1 <> count(*) OR max(version) < (SELECT version FROM runs r WHERE r.run_id = checkpoints.run_id)`).all() as { runId: string }[]).map((r) => r.runId);
  } finally {
    file.close();
  }
}

describe('stepwise backup, while a worker runs', { timeout: 240_000 }, () => {
  it('writes a snapshot of one moment that the read commands open, never overwrites one, and restored, its runs finish', async () => {
    for (const id of ['bk-1', 'bk-2', 'bk-3']) expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write rows', '--run-id', id], ENV)).code).toBe(0);
    const worker = runStepwise(['worker', '--agent', AGENT, '--concurrency', '3', '--idle-exit-ms', '1500', '--visibility-ms', '2000'], ENV);
    await worker.line(/^worker \S+ ready/);
    const backups: string[] = [];
    for (let i = 0; i < 3; i++) {
      await pause(300);
      const target = join(db.path, '..', 'backups', `b${i}.db`);
      const made = await stepwiseCli(['backup', target], ENV);
      expect(made.err).toBe('');
      expect(made.code).toBe(0);
      expect(made.out).toMatch(new RegExp(`^backed up ${db.path} to ${target}: 3 runs, [\\d.]+ MB, as they were at \\d{4}-`));
      backups.push(target);
    }
    const again = await stepwiseCli(['backup', backups[0]!], ENV);
    expect(again.code).toBe(2);
    expect(again.err).toContain('already exists, and a backup never overwrites');
    // The runs finish, and the worker stops once it has had no step for its idle time.
    writeFileSync(GATE, '');
    if (worker.child.exitCode === null) await once(worker.child, 'exit');
    expect(worker.child.exitCode).toBe(0);

    const done = await stepwiseCli(['status', '--json'], ENV);
    expect((JSON.parse(done.out) as { status: string }[]).map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
    for (const backup of backups) {
      expect(faults(backup)).toEqual([]);
      const shown = await stepwiseCli(['status', '--db', backup, '--json'], {});
      expect(shown.code).toBe(0);
      expect((JSON.parse(shown.out) as unknown[]).length).toBe(3);
    }

    // Restored (the worker stopped, the file's -wal and -shm removed with it): the runs go back to that
    // moment, a worker takes them on from there, and the steps after it are done again under their keys,
    // which the effects database holds, so each row is written once.
    const taken = JSON.parse((await stepwiseCli(['status', '--db', backups[0]!, '--json'], {})).out) as { step: number }[];
    expect(taken.some((r) => r.step < 30)).toBe(true);
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${db.path}${suffix}`, { force: true });
    copyFileSync(backups[0]!, db.path);
    expect(existsSync(`${db.path}-wal`)).toBe(false);
    // A run's message a worker held at that moment is taken again once its visibility timeout has passed.
    const resumed = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '4000'], ENV);
    expect(resumed.code).toBe(0);
    const after = JSON.parse((await stepwiseCli(['status', '--json'], ENV)).out) as { status: string }[];
    expect(after.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
    const effects = new Database(EFFECTS, { readonly: true });
    try {
      expect((effects.prepare('SELECT count(*) AS n FROM applied').get() as { n: number }).n).toBe(90);
      // Some keys were received twice: once before the backup's moment was passed, once after the restore.
      expect((effects.prepare('SELECT count(*) AS n FROM (SELECT key FROM received GROUP BY key HAVING count(*) > 1)').get() as { n: number }).n).toBeGreaterThan(0);
    } finally {
      effects.close();
    }
  });

  it('counts one run as one run', async () => {
    const one = tempDb();
    try {
      const env = { ...ENV, STEPWISE_DB: one.path };
      expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write rows', '--run-id', 'only'], env)).code).toBe(0);
      const made = await stepwiseCli(['backup', join(one.path, '..', 'one-backup.db')], env);
      expect(made.code, made.err).toBe(0);
      expect(made.out).toMatch(/: 1 run, [\d.]+ MB, as they were at /);
    } finally {
      one.cleanup();
    }
  });
});
