import { spawnSync } from 'node:child_process';
import Database from 'better-sqlite3';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { overwriteTablePage } from '../support/damaged-files.ts';
import { tempDb } from '../support/harness.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'test/support/js-agent.mjs');
const db = tempDb();
afterAll(() => db.cleanup());

const stepwise = (...args: string[]) => {
  const r = spawnSync(process.execPath, [BIN, ...args, '--db', db.path], {
    cwd: ROOT, encoding: 'utf8', timeout: 60_000,
    env: { ...process.env, STEPWISE_DB: '', ANTHROPIC_API_KEY: '', STEPWISE_LOG_FORMAT: 'json' },
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
};

describe('a worker on a file damaged where a step reads', () => {
  it('stops with exit 2 and what to do, its message handed back, where it retried the step for as long as it ran', () => {
    expect(stepwise('start', '--agent', AGENT, '--goal', 'echo', '--run-id', 'damaged-1').code).toBe(0);
    // The steps table's page, which the step's load reads (a decision recorded for the next step) and the
    // worker's start does not; the queue's pages are as they were, so the worker receives the message.
    overwriteTablePage(db.path, 'steps');
    // Without the stop, the worker failed the step, released it and failed it again, each time later,
    // until the idle exit came between two tries: exit 0, the damage said only in its step-error logs.
    const worker = stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '3000');
    expect(worker.code, worker.err).toBe(2);
    expect(worker.err).toContain('stepwise: database disk image is malformed: the database (--db, STEPWISE_DB) is damaged (cut short, or overwritten in part), which no retry mends');
    expect(worker.err).not.toContain('"event":"step-error"');
    // Handed back, not counted as a try: the run's one message waits for the file to be mended.
    const file = new Database(db.path, { readonly: true });
    try {
      expect(file.prepare('SELECT receive_count FROM queue').all()).toEqual([{ receive_count: 0 }]);
    } finally {
      file.close();
    }
  });
});
