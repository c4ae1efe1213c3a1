import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RUNS_SHOWN } from '../../lib/cli/commands/read.ts';
import { loadAgent } from '../../lib/agent.ts';
import { startRun } from '../../lib/engine/start.ts';
import { openLocalEngine } from '../../lib/local/engine.ts';
import { BIN, ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn' };
afterAll(() => db.cleanup());
beforeAll(async () => {
  const engine = await openLocalEngine(await loadAgent(AGENT), { dbPath: db.path, log: pino({ level: 'silent' }) });
  try {
    for (let i = 0; i <= RUNS_SHOWN; i++) await startRun(engine.deps, { goal: `run ${i}`, runId: `many-${i}` });
  } finally {
    engine.close();
  }
}, 120_000);

describe('stepwise status over more runs than it shows', () => {
  it('shows a page of the most recent, and the command for the next, which shows the rest', async () => {
    const table = await stepwiseCli(['status'], env);
    expect(table.code).toBe(0);
    const lines = table.out.trim().split('\n');
    expect(lines).toHaveLength(1 + RUNS_SHOWN + 1);
    const note = /^\(1000 runs shown; the next 1000: stepwise status --cursor (\S+)\)$/.exec(lines.at(-1)!);
    expect(note, lines.at(-1)).not.toBeNull();
    const shown = new Set(lines.slice(1, -1).map((l) => l.split(/\s+/)[0]));
    expect(shown.size).toBe(RUNS_SHOWN);

    const rest = await stepwiseCli(['status', '--cursor', note![1]!], env);
    const restRuns = rest.out.trim().split('\n').slice(1).map((l) => l.split(/\s+/)[0]!);
    expect(restRuns).toHaveLength(1);
    expect(shown.has(restRuns[0])).toBe(false);
    expect(restRuns[0]).toMatch(/^many-\d+$/);

    const json = await stepwiseCli(['status', '--json'], env);
    expect(JSON.parse(json.out)).toHaveLength(RUNS_SHOWN);
    expect(json.err.trim()).toMatch(/^stepwise: 1000 runs shown; the next 1000: stepwise status --cursor \S+$/);

    const bad = await stepwiseCli(['status', '--cursor', 'not-a-cursor'], env);
    expect(bad.code).toBe(2);
    expect(bad.err.trim()).toBe('stepwise: invalid cursor "not-a-cursor": pass back the next of the page before, as it was');

    const waiting = await stepwiseCli(['status', '--status', 'waiting'], env);
    expect(waiting.out.trim()).toBe('no runs');
  });

  it('the next page\'s command carries the options that chose the store, quoted for the shell, and reads it pasted', async () => {
    // The same database through a directory whose name a shell would split and expand unquoted.
    const odd = mkdtempSync(join(tmpdir(), 'stepwise-odd-'));
    try {
      const link = join(odd, "my runs, it's $HOME");
      symlinkSync(dirname(db.path), link);
      const oddDb = join(link, 'stepwise.db');
      const noEnvDb = { STEPWISE_DB: undefined, STEPWISE_LOG_LEVEL: 'warn' };
      const quoted = `'${oddDb.replace(/'/g, `'\\''`)}'`;

      const table = await stepwiseCli(['status', '--db', oddDb, '--backend', 'local'], noEnvDb);
      expect(table.code).toBe(0);
      const note = /^\(1000 runs shown; the next 1000: (stepwise status .*)\)$/.exec(table.out.trim().split('\n').at(-1)!);
      expect(note).not.toBeNull();
      expect(note![1]).toMatch(/^stepwise status --db .* --backend local --cursor \S+$/);
      expect(note![1]).toContain(`--db ${quoted} --backend local`);
      const json = await stepwiseCli(['status', '--db', oddDb, '--json'], noEnvDb);
      expect(json.err.trim()).toMatch(/^stepwise: 1000 runs shown; the next 1000: stepwise status --db '.*' --cursor \S+$/);

      // Pasted into a shell elsewhere, with no STEPWISE_DB: the rest of the same store.
      const pasted = note![1]!.replace(/^stepwise /, `"${process.execPath}" "${BIN}" `);
      const { STEPWISE_DB: _unset, ...elsewhere } = process.env;
      const child = spawn('bash', ['-c', pasted], { cwd: odd, env: { ...elsewhere, STEPWISE_LOG_LEVEL: 'warn' } });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => { out += d; });
      child.stderr.on('data', (d: Buffer) => { err += d; });
      const code = await new Promise((resolve) => child.on('exit', resolve));
      expect(err).toBe('');
      expect(code).toBe(0);
      const rest = out.trim().split('\n').slice(1);
      expect(rest).toHaveLength(1);
      expect(rest[0]).toMatch(/^many-\d+\s/);
    } finally {
      rmSync(odd, { recursive: true, force: true });
    }
  });

  // Real pipes; the exit code of the stepwise side is printed. `true` reads nothing and is gone long before
  // stepwise writes: its first write to that stream finds no reader.
  it.each([
    ['head, after 100 bytes of stdout and stderr', '2>&1 | head -c 100 >/dev/null'],
    ['a reader gone before stdout is written', '| true'],
    ['a reader gone before stderr is written (the note on more runs)', '2>&1 >/dev/null | true'],
  ])('ends quietly, exit code 0, when its reader goes away: %s', async (_what, pipe) => {
    const script = `"${process.execPath}" "${BIN}" status --json ${pipe}; echo "\${PIPESTATUS[0]}"`;
    const child = spawn('bash', ['-c', script], { cwd: ROOT, env: { ...process.env, ...env } });
    let out = '';
    child.stdout.on('data', (d: Buffer) => { out += d; });
    await new Promise((resolve) => child.on('exit', resolve));
    expect(out.trim()).toBe('0');
  });
});
