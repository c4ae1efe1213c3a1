import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, NOBODY, ROOT, asRoot, stepwiseSync } from '../support/cli.ts';

const AGENT = join(ROOT, 'test/support/js-agent.mjs');
// As root, the commands run as nobody, who owns the directory (so SQLite may make the -wal and -shm there)
// but not the file.
const dir = mkdtempSync(join(tmpdir(), 'stepwise-read-only-'));
const db = join(dir, 'runs.db');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const stepwise = (...args: string[]) => stepwiseSync([...args, '--db', db], { STEPWISE_DB: '', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: 'a-token-of-16-chars-or-more' }, { asNobody: true });

describe('a database file this user may not write', () => {
  it('is refused as the command opens it, by init, start, worker and serve, where init said "ready" and serve answered 500s', () => {
    expect(spawnSync(process.execPath, [BIN, 'init', '--db', db], { cwd: ROOT, encoding: 'utf8' }).status).toBe(0);
    chmodSync(dir, 0o755);
    if (asRoot) chownSync(dir, NOBODY, NOBODY);
    chmodSync(db, 0o444);
    const refused = 'stepwise: attempt to write a readonly database: this user cannot write the database (--db, STEPWISE_DB)';
    for (const args of [['init'], ['start', '--agent', AGENT, '--goal', 'echo'], ['worker', '--agent', AGENT, '--idle-exit-ms', '100'], ['serve', '--agent', AGENT, '--port', '0']]) {
      const r = stepwise(...args);
      expect(r.err, args.join(' ')).toContain(refused);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.out, args.join(' ')).not.toContain('ready');
    }
    // Reading needs no write: status still shows the runs.
    const status = stepwise('status');
    expect(status.code, status.err).toBe(0);
    expect(status.out.trim()).toBe('no runs');
  });

  it('says so when this user may not read the file (made under umask 077 by another user), where SQLite said only "unable to open"', () => {
    const own = join(dir, 'private');
    mkdirSync(own, { mode: 0o777 });
    chmodSync(own, 0o777);
    const file = join(own, 'runs.db');
    expect(spawnSync(process.execPath, [BIN, 'init', '--db', file], { cwd: ROOT, encoding: 'utf8' }).status).toBe(0);
    chmodSync(file, asRoot ? 0o600 : 0o000);
    for (const args of [['status'], ['start', '--agent', AGENT, '--goal', 'echo']]) {
      const r = spawnSync(process.execPath, [BIN, ...args, '--db', file], {
        cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, STEPWISE_DB: '' }, ...(asRoot ? { uid: NOBODY, gid: NOBODY } : {}),
      });
      expect(r.stderr, args[0]).toMatch(new RegExp(`^stepwise: cannot open the database ${file}: unable to open database file: this user may not read and write it \\(mode ${asRoot ? 600 : 0}, owner uid \\d+\\): give this user read and write access to it, or run as its owner\n$`));
      expect(r.status, args[0]).toBe(2);
    }
  });
});
