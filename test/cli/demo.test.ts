import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { completedStepLines, done, startMessagesServer, toolUse } from '../support/messages-server.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const DEMO = join(ROOT, 'examples/migrate/demo.ts');

describe('npm run demo', () => {
  it('kills its worker mid-step, resumes on a fresh process, waits for approval, and copies every row exactly once', { timeout: 300_000 }, () => {
    const r = spawnSync('npm', ['run', '--silent', 'demo'], { cwd: ROOT, encoding: 'utf8', timeout: 240_000, env: { ...process.env, ANTHROPIC_API_KEY: '' } });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('model: offline scripted model (no ANTHROPIC_API_KEY)');
    expect(r.stdout).toMatch(/worker A \(pid \d+\) killed with SIGKILL in the middle of step 6/);
    expect(r.stdout).toMatch(/"applied":false,.*"note":"already applied under this idempotency key"/);
    expect(r.stdout).toContain('source rows 1000, target rows 1000, distinct 1000, duplicates 0, missing 0, mismatched 0');
    expect(r.stdout).toContain('effects applied 11, once each: 10 batches copied, 1 table dropped');
    expect(r.stdout).toContain('every row was copied exactly once: yes');
    // The risky step waited for approval with no process running; the link points at stepwise serve.
    expect(r.stdout).toMatch(/its link: http:\/\/127\.0\.0\.1:\d+\/approvals\/v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/);
    expect(r.stdout).toMatch(/approving from the terminal \(stepwise approve migrate-\d+\)\n  run migrate-\d+: approved; it continues/);
    expect(r.stdout).toContain('With approval from ops@example.com, the source table was dropped.');
    const history = r.stdout.slice(r.stdout.indexOf('6. the checkpoint history'), r.stdout.indexOf('7. the run'));
    expect(history).toMatch(/\n\d+\s+12\s+waiting\s/);
    // The run changed hands at the approval: the worker that paused is not the one that finished.
    const pausedBy = /\n\d+\s+12\s+waiting\s+(\S+)/.exec(history)![1];
    const finishedBy = /drop_source\s+\S+\/step-14\s+(\S+)/.exec(history)![1];
    expect(finishedBy).not.toBe(pausedBy);
    // Both workers wrote checkpoints: the history shows the run changing hands at step 6.
    const workers = [...history.matchAll(/copy_batch\s+\S+\/step-(\d+)\s+(\S+)/g)].map((m) => [Number(m[1]), m[2]] as const);
    expect(new Set(workers.filter(([step]) => step < 6).map(([, w]) => w)).size).toBe(1);
    expect(workers.find(([step]) => step === 6)![1]).not.toBe(workers.find(([step]) => step === 5)![1]);
  });

  it('--help says what it does and runs nothing; a mistyped option is refused with the usage', () => {
    const help = spawnSync('npm', ['run', '--silent', 'demo', '--', '--help'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run demo \[-- --approve\]\n/);
    expect(help.stdout).not.toContain('started run');
    const typo = spawnSync('npm', ['run', '--silent', 'demo', '--', '--aprove'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(typo.status).toBe(2);
    expect(typo.stderr).toMatch(/^demo: Unknown option '--aprove'/);
    expect(typo.stderr).toContain('usage: npm run demo');
    expect(typo.stdout).toBe('');
  });

  it('a DEMO_ROWS that is not a whole number from 1 to 5600 is refused at once, before anything starts', () => {
    for (const rows of ['abc', '0', '250.5', '5601']) {
      const r = spawnSync(process.execPath, ['--import', 'tsx', DEMO], { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, DEMO_ROWS: rows } });
      expect(r.stderr).toBe(`demo: DEMO_ROWS must be a whole number from 1 to 5600, got "${rows}"\n`);
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
    }
  });

  it('a DEMO_PORT that is not a port, or that is in use, is refused at once, before anything starts', async () => {
    for (const port of ['abc', '0', '80.5', '65536']) {
      const r = spawnSync(process.execPath, ['--import', 'tsx', DEMO], { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, DEMO_PORT: port } });
      expect(r.stderr).toBe(`demo: DEMO_PORT must be a whole number from 1 to 65535, got "${port}"\n`);
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
    }
    // Found only when stepwise serve started, after the whole migration, as a stack trace that hid serve's reason.
    const taken = createServer();
    await new Promise<void>((ok) => taken.listen(0, '127.0.0.1', ok));
    try {
      const port = (taken.address() as AddressInfo).port;
      const r = await new Promise<{ status: number | null; stdout: string; stderr: string }>((ok) => {
        const child = spawn(process.execPath, ['--import', 'tsx', DEMO], { cwd: ROOT, env: { ...process.env, DEMO_PORT: String(port) } });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
        child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
        child.on('close', (status) => ok({ status, stdout, stderr }));
      });
      expect(r.stderr).toBe(`demo: DEMO_PORT ${port} is in use: pick another, or leave DEMO_PORT unset for a free one\n`);
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
    } finally {
      await new Promise((ok) => taken.close(ok));
    }
  });

  it('with fewer rows it kills worker A in its middle batch, and the redo copies nothing twice', { timeout: 300_000 }, () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', DEMO], { cwd: ROOT, encoding: 'utf8', timeout: 240_000, env: { ...process.env, ANTHROPIC_API_KEY: '', DEMO_ROWS: '250' } });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    // Three batches, at steps 2 to 4: the middle one is step 3.
    expect(r.stdout).toMatch(/worker A \(pid \d+\) killed with SIGKILL in the middle of step 3/);
    expect(r.stdout).toMatch(/step 3, redone by worker B under the same idempotency key migrate-\d+\/step-3:\n.*"applied":false,.*"note":"already applied under this idempotency key"/);
    expect(r.stdout).toContain('source rows 250, target rows 250, distinct 250, duplicates 0, missing 0, mismatched 0');
    expect(r.stdout).toContain('effects applied 4, once each: 3 batches copied, 1 table dropped');
  });
});

interface Demo {
  child: ChildProcess;
  out: string;
  err: string;
  /** Every child pid the demo printed. */
  pids: Set<number>;
  exited: Promise<number | null>;
}

const started: Demo[] = [];
// A test that fails may leave the demo or its children running: stop them, not the next test's.
afterEach(() => {
  for (const demo of started.splice(0)) {
    for (const pid of [demo.child.pid!, ...demo.pids]) if (alive(pid)) process.kill(pid, 'SIGKILL');
  }
});

/** The demo as a supervisor runs it: its own process, not npm's. */
function startDemo(env: Record<string, string>): Demo {
  const child = spawn(process.execPath, ['--import', 'tsx', DEMO], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const demo: Demo = { child, out: '', err: '', pids: new Set(), exited: new Promise((r) => child.on('close', r)) };
  started.push(demo);
  child.stdout!.on('data', (d: Buffer) => {
    demo.out += d.toString();
    for (const m of demo.out.matchAll(/pid (\d+)/g)) demo.pids.add(Number(m[1]));
  });
  child.stderr!.on('data', (d: Buffer) => { demo.err += d.toString(); });
  return demo;
}

/** Resolves once the demo's stdout matches; rejects if it exits first. */
function printed(demo: Demo, pattern: RegExp): Promise<void> {
  return new Promise((ok, fail) => {
    demo.child.stdout!.on('data', () => { if (pattern.test(demo.out)) ok(); });
    void demo.exited.then(() => fail(new Error(`the demo exited without printing ${pattern}:\n${demo.out}${demo.err}`)));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

describe('npm run demo leaves no process behind', () => {
  it('when it fails: a model that copies in other batches never reaches the kill step; the demo says so and stops worker A', { timeout: 120_000 }, async () => {
    const claude = await startMessagesServer();
    try {
      // Claude copies all 1000 rows in one batch and is done at step 2: step 6, the kill step, never comes.
      claude.otherwise((request) => [toolUse('inspect_tables', {}), toolUse('copy_batch', { afterId: 0, limit: 1000 })][completedStepLines(request.userText).length] ?? done('Copied every row.'));
      const demo = startDemo({ ANTHROPIC_API_KEY: 'sk-test-local', ANTHROPIC_BASE_URL: claude.url });
      const code = await demo.exited;
      expect(demo.err).toContain('demo failed: Error: the run is completed, but worker A never held in step 6');
      expect(code).toBe(1);
      expect(demo.out).toMatch(/2\. worker A \(pid \d+\) works the run/);
      expect([...demo.pids].filter(alive)).toEqual([]);
    } finally {
      await claude.stop();
    }
  });

  it.each([
    // `timeout` or a supervisor stopping the demo while stepwise serve answers the approval link.
    { signal: 'SIGTERM' as const, at: /stepwise serve \(pid \d+\) serves/, code: 143 },
    { signal: 'SIGINT' as const, at: /2\. worker A \(pid \d+\) works the run/, code: 130 },
  ])('when $signal is sent to the demo process alone, it stops its children first', { timeout: 120_000 }, async ({ signal, at, code }) => {
    const demo = startDemo({ ANTHROPIC_API_KEY: '' });
    await printed(demo, at);
    demo.child.kill(signal);
    const exitCode = await demo.exited;
    expect(demo.pids.size).toBeGreaterThan(0);
    expect([...demo.pids].filter(alive)).toEqual([]);
    expect(exitCode).toBe(code);
    expect(demo.err).toContain(`demo stopped (${signal}); stopping its workers and server`);
  });
});
