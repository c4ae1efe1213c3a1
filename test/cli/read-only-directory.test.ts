import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseSync } from '../support/cli.ts';

const AGENT = join(ROOT, 'test/support/js-agent.mjs');
const top = mkdtempSync(join(tmpdir(), 'stepwise-read-only-dir-'));
chmodSync(top, 0o755);
const dir = join(top, 'db');
const db = join(dir, 'runs.db');
afterAll(() => {
  chmodSync(dir, 0o755);
  rmSync(top, { recursive: true, force: true });
});

const env = { STEPWISE_DB: '', ANTHROPIC_API_KEY: '', STEPWISE_LOG_FORMAT: 'json' };
const stepwise = (...args: string[]) => stepwiseSync([...args, '--db', db], env);
// Root writes any directory whatever its mode: as root, the reading commands run as nobody.
const asReader = (...args: string[]) => stepwiseSync([...args, '--db', db], env, { asNobody: true });

/**
 * A SQLite file in a directory this user may not write (a read-only mount, a backup volume, another user's
 * directory), its processes all stopped. The file is in WAL mode, as every file a worker opened is, and its
 * -wal and -shm went with the last process: SQLite reads a WAL file only through a -shm it makes beside it,
 * so it refused to open the file at all, and status, history, show, watch and drift, which the README says
 * still read such a file, stopped with "cannot open the database ...: unable to open database file".
 */
describe('a database file in a directory this user may not write', () => {
  it('is read by the commands that only read, from a copy in memory; watch refuses a run that would never move in it', () => {
    const ran = stepwise('run', '--agent', AGENT, '--goal', 'echo', '--run-id', 'done');
    expect(ran.code, ran.err).toBe(0);
    const started = stepwise('start', '--agent', AGENT, '--goal', 'echo', '--run-id', 'queued');
    expect(started.code, started.err).toBe(0);
    // Every process closed it: the file alone is the database.
    expect(readdirSync(dir)).toEqual(['runs.db']);
    chmodSync(dir, 0o555);

    const status = asReader('status');
    expect(status.err).toBe('');
    expect(status.code).toBe(0);
    expect(status.out).toMatch(/^done +completed/m);
    expect(status.out).toMatch(/^queued +running/m);
    for (const args of [['status', 'done'], ['history', 'done'], ['show', 'done'], ['watch', 'done'], ['drift', '--agent', AGENT]]) {
      const r = asReader(...args);
      expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(0);
    }
    expect(asReader('show', 'done').out).toContain('hello from js');

    const watch = asReader('watch', 'queued');
    expect(watch.code).toBe(2);
    expect(watch.err).toBe(`stepwise: run queued is running in ${db}, a file in a directory this user may not write, which this command reads from a copy taken once, in which it would never move: watch it as a user who may write that directory, or where a worker works it\n`);
    // Nothing was written beside the file.
    expect(readdirSync(dir)).toEqual(['runs.db']);
    expect(existsSync(`${db}-shm`)).toBe(false);
  });
});
