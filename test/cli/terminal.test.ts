import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const env = { STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '2' };

/** The environment of a user who set nothing about logs. */
function plainEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const { STEPWISE_LOG_LEVEL: _level, STEPWISE_LOG_FORMAT: _format, ...rest } = process.env;
  return { ...rest, ...env, ...extra };
}

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The command run in a real pseudo-terminal (util-linux `script`): stdout and stderr are both the terminal. */
function inTerminal(args: string[], extraEnv: Record<string, string> = {}) {
  const command = [process.execPath, BIN, ...args].map(quote).join(' ');
  const r = spawnSync('script', ['-qec', command, '/dev/null'], {
    cwd: ROOT, encoding: 'utf8', timeout: 60_000, input: '',
    env: plainEnv(extraEnv),
  });
  return { code: r.status, lines: r.stdout.split(/\r?\n/).filter(Boolean) };
}

const jsonLines = (lines: string[]) => lines.filter((l) => l.startsWith('{'));

describe('the stepwise command in a terminal', () => {
  it('run shows the progress lines and no JSON log line beside them', () => {
    const r = inTerminal(['run', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'tty-1']);
    expect(r.code).toBe(0);
    expect(r.lines.filter((l) => / {2}step \d {2}write_row {2}ok/.test(l))).toHaveLength(2);
    expect(r.lines).toContain('run tty-1: completed at version 4');
    expect(jsonLines(r.lines)).toEqual([]);
  });

  it('keeps the JSON log lines in a terminal with --log json, the checkpoint line at info', () => {
    const r = inTerminal(['run', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'tty-2', '--log', 'json']);
    expect(r.code).toBe(0);
    const checkpoints = jsonLines(r.lines).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === 'checkpoint');
    expect(checkpoints.map((l) => [l.level, l.runId, l.step, l.version])).toEqual([
      ['info', 'tty-2', 0, 1], ['info', 'tty-2', 1, 2], ['info', 'tty-2', 2, 3], ['info', 'tty-2', 2, 4],
    ]);
    for (const l of checkpoints) expect(l).toMatchObject({ workerId: expect.stringMatching(/-\d+$/), bytes: expect.any(Number) });
  });

  it('writes JSON on stderr when stderr is not a terminal, and the pretty form when asked with --log pretty', async () => {
    const piped = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'pipe-1'], { ...env, STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined });
    expect(piped.code).toBe(0);
    expect(piped.err.trim().split('\n').map((l) => (JSON.parse(l) as { event?: string }).event)).toContain('checkpoint');
    const pretty = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'pipe-2', '--log', 'pretty'], { ...env, STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined });
    expect(pretty.code).toBe(0);
    expect(pretty.out).toContain('run pipe-2: completed at version 4');
    expect(pretty.err).toBe('');
  });

  it('refuses an unknown log format with a one-line reason', async () => {
    const r = await stepwiseCli(['status', '--log', 'yaml'], env);
    expect(r.code).toBe(2);
    expect(r.err).toBe('stepwise: --log must be json or pretty, got "yaml"\n');
  });
});
