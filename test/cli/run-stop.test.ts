import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
const effectsPath = join(db.path, '..', 'effects.db');
afterAll(() => db.cleanup());
// Step 2's effect holds 1.5 s after it is received, so the signal lands inside it.
const env = { STEPWISE_DB: db.path, EFFECTS_DB: effectsPath, PROCESS_AGENT_ROWS: '4', PROCESS_AGENT_HOLD_AT: '2', PROCESS_AGENT_HOLD_MS: '1500', STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };

function received(key: string): number {
  const effects = new Database(effectsPath);
  try {
    effects.exec('CREATE TABLE IF NOT EXISTS received (id INTEGER PRIMARY KEY, key TEXT NOT NULL, pid INTEGER NOT NULL)');
    return (effects.prepare('SELECT count(*) AS n FROM received WHERE key = ?').get(key) as { n: number }).n;
  } finally {
    effects.close();
  }
}

describe('stepwise run, stopped by a signal', () => {
  it('finishes and checkpoints the step in hand, says how to continue, and `run --run-id` without --goal continues it', { timeout: 120_000 }, async () => {
    const run = runStepwise(['run', '--agent', AGENT, '--goal', 'write 4 rows', '--run-id', 'stop-1'], env);
    await run.line(/^run stop-1 v2 {2}step 1 /);
    const deadline = Date.now() + 30_000;
    while (received('stop-1/step-2') === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(received('stop-1/step-2')).toBe(1);
    run.child.kill('SIGTERM');
    const [code, signal] = await once(run.child, 'exit') as [number | null, string | null];
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(run.out()).toMatch(/^run stop-1 v3 {2}step 2 {2}write_row {2}ok: /m);
    // Said when the signal came, before the step in hand ended.
    expect(run.out()).toMatch(/^stopping \(SIGTERM\): the step in hand finishes and is checkpointed first; SIGTERM again stops at once\nrun stop-1 v3 {2}step 2 /m);
    expect(run.out().trim().split('\n').at(-1)).toBe(
      `run stop-1: running at version 3 (stopped by SIGTERM after the step in hand; \`stepwise run --agent ${AGENT} --run-id stop-1\` or a worker continues it)`,
    );

    const again = await stepwiseCli(['run', '--agent', AGENT, '--run-id', 'stop-1'], env);
    expect(again.code).toBe(0);
    expect(again.out).toContain('run stop-1 exists at version 3: resuming it');
    expect(again.out).toMatch(/^run stop-1 v6 {2}completed after 4 steps: wrote 4 rows$/m);
    // Stopped between steps, not inside one: no effect was even called twice.
    for (const step of [1, 2, 3, 4]) expect(received(`stop-1/step-${step}`)).toBe(1);

    const unknown = await stepwiseCli(['run', '--agent', AGENT, '--run-id', 'no-such-run'], env);
    expect(unknown.code).toBe(2);
    expect(unknown.err.trim()).toBe('stepwise: run no-such-run does not exist: give --goal to start it');
  });
});

describe('stepwise run, its reader gone (`| head -1`)', () => {
  it('exits 141, as a tool SIGPIPE stopped, not 0 as though the run had ended well; the run goes on from its checkpoint', { timeout: 120_000 }, async () => {
    // Step 2's effect holds 1.5 s: head has read its line and gone long before run writes again.
    const script = `"${process.execPath}" "${join(ROOT, 'bin/stepwise.js')}" run --agent "${AGENT}" --goal "write 4 rows" --run-id pipe-1 | head -1; echo "exit \${PIPESTATUS[0]}"`;
    const shell = await runShell(script, { ...process.env, ...env, STEPWISE_LOG_FORMAT: 'json' });
    expect(shell.out.split('\n')[0]).toMatch(/^model: offline scripted model/);
    expect(shell.out.trim().split('\n').at(-1)).toBe('exit 141');
    // The line on stderr says why the run stopped where it did, not that a tool ended the process.
    const line = JSON.parse(shell.err.trim().split('\n').find((l) => l.includes('exited-in-step'))!) as { code: number; msg: string };
    expect(line.code).toBe(141);
    expect(line.msg).toMatch(/^stepwise run exited \(code 141\) before run pipe-1 had ended; .*; its stdout's reader went away \(a pipe closed, as `\| head` closes it\)$/);
    const status = await stepwiseCli(['status', 'pipe-1', '--json'], env);
    expect(JSON.parse(status.out)).toMatchObject({ runId: 'pipe-1', status: 'running' });
    const again = await stepwiseCli(['run', '--agent', AGENT, '--run-id', 'pipe-1'], env);
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/^run pipe-1 v\d+ {2}completed after 4 steps: wrote 4 rows$/m);
    for (const step of [1, 2, 3, 4]) expect(received(`pipe-1/step-${step}`)).toBeGreaterThanOrEqual(1);
  });

  it('a command that only reads still exits 0 when its reader goes away', { timeout: 60_000 }, async () => {
    const script = `"${process.execPath}" "${join(ROOT, 'bin/stepwise.js')}" history pipe-1 | true; echo "exit \${PIPESTATUS[0]}"`;
    expect((await runShell(script, { ...process.env, ...env })).out.trim()).toBe('exit 0');
  });
});

/** A bash script's stdout and stderr, once it exits. */
async function runShell(script: string, shellEnv: NodeJS.ProcessEnv): Promise<{ out: string; err: string }> {
  const child = spawn('bash', ['-c', script], { cwd: ROOT, env: shellEnv });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => { out += d; });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  await once(child, 'exit');
  return { out, err };
}
