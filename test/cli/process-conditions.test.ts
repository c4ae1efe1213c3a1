import Database from 'better-sqlite3';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { Socket } from 'node:net';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { BIN, ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const db = tempDb();
afterAll(() => db.cleanup());

/** The command as a shell runs it, with a timeout: a hang is a failure, not a test that never ends. */
async function shell(script: string, env: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn('sh', ['-c', script], { env: { ...process.env, STEPWISE_DB: db.path, ...env } });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => { out += d; });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const [code] = await once(child, 'exit') as [number | null];
  clearTimeout(timer);
  return { code, out, err };
}

describe('the stepwise command under the conditions of a real deployment', () => {
  it('started in a directory that was deleted, says so and exits 2, where it waited forever', async () => {
    const gone = join(db.path, '..', 'release-1');
    mkdirSync(gone);
    const r = await shell(`cd '${gone}' && rmdir '${gone}' && exec '${process.execPath}' '${BIN}' status`);
    expect(r).toEqual({ code: 2, out: '', err: 'stepwise: the current directory no longer exists (ENOENT): cd to one that does and run the command again\n' });
  });

  it('with stdout on a full disk, says so in one line and exits 1, where it threw a stack trace', async () => {
    expect((await shell(`exec '${process.execPath}' '${BIN}' init`)).code).toBe(0);
    // /dev/full refuses every write with ENOSPC, as a redirect to a file on a full disk does.
    for (const command of ['status', '--help']) {
      const r = await shell(`exec '${process.execPath}' '${BIN}' ${command} > /dev/full`);
      expect(r).toEqual({ code: 1, out: '', err: 'stepwise: cannot write to stdout: ENOSPC: no space left on device, write\n' });
    }
    // stderr full as well: the code the error line had set is kept.
    const unknown = await shell(`exec '${process.execPath}' '${BIN}' status no-such-run 2> /dev/full`);
    expect(unknown.code).toBe(2);
  });

  // A PID namespace of its own makes the worker PID 1 there, as in a container with no init (root only).
  const asPid1 = spawnSync('unshare', ['--pid', '--fork', 'true']).status === 0;
  const stops = [
    { name: 'a SIGTERM then a Ctrl-C', wrap: [] as string[], signals: ['SIGTERM', 'SIGINT'] as const, code: 130 },
    ...(asPid1 ? [{ name: 'two SIGTERMs to PID 1', wrap: ['--pid', '--fork', '--kill-child'], signals: ['SIGTERM', 'SIGTERM'] as const, code: 143 }] : []),
  ];
  for (const { name, wrap, signals, code } of stops) {
    it(`a worker stopped gently is stopped at once by a second signal: ${name}`, { timeout: 60_000 }, async () => {
      const effects = join(db.path, '..', `effects-${code}.db`);
      const env = { STEPWISE_DB: db.path, EFFECTS_DB: effects, PROCESS_AGENT_ROWS: '2', PROCESS_AGENT_HOLD_AT: '1', PROCESS_AGENT_HOLD_MS: '30000', STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };
      const runId = `second-signal-${code}`;
      expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', runId], env)).code).toBe(0);
      const worker = wrap.length
        ? wrapped(['unshare', ...wrap, process.execPath, BIN, 'worker', '--agent', AGENT], env)
        : runStepwise(['worker', '--agent', AGENT], env);
      try {
        await worker.line(/^worker \S+ ready: /);
        // Inside step 1's effect, which holds 30 s: the first signal waits for it, the second does not.
        const deadline = Date.now() + 20_000;
        while (!received(effects, `${runId}/step-1`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        const pid = wrap.length ? childOf(worker.child.pid!) : worker.child.pid!;
        process.kill(pid, signals[0]);
        await worker.line(/ stopping \(SIG/);
        process.kill(pid, signals[1]);
        // Not timed (tests assert no wall-clock times): a gentle stop, which waits out the 30 s effect, exits
        // 0; only the second signal's exit is 128 + its number.
        const [exitCode] = await once(worker.child, 'exit') as [number | null];
        expect(exitCode).toBe(code);
        expect(worker.out()).not.toMatch(/stopping[^\n]*\n[^\n]*stopping/);
      } finally {
        worker.child.kill('SIGKILL');
      }
    });
  }

  const loads = [
    { name: 'a worker', wrap: [] as string[], command: ['worker'], said: /^worker \S+ stopped before it was ready$/m, unsaid: / ready: / },
    { name: '`run`', wrap: [] as string[], command: ['run', '--goal', 'never started', '--run-id', 'stopped-loading'], said: /^stopped \(SIGTERM\) before the run was started or worked$/m, unsaid: /^run / },
    { name: 'serve', wrap: [] as string[], command: ['serve', '--port', '0'], said: /^stopped before it served$/m, unsaid: /^serving / },
    ...(asPid1 ? [
      { name: 'serve as PID 1', wrap: ['--pid', '--fork', '--kill-child'], command: ['serve', '--port', '0'], said: /^stopped before it served$/m, unsaid: /^serving / },
      { name: 'a worker that is PID 1', wrap: ['--pid', '--fork', '--kill-child'], command: ['worker'], said: /^worker \S+ stopped before it was ready$/m, unsaid: / ready: / },
      { name: '`run` as PID 1', wrap: ['--pid', '--fork', '--kill-child'], command: ['run', '--goal', 'never started', '--run-id', 'stopped-loading-1'], said: /^stopped \(SIGTERM\) before the run was started or worked$/m, unsaid: /^run / },
    ] : []),
  ];
  for (const [i, { name, wrap, command, said, unsaid }] of loads.entries()) {
    it(`${name} sent SIGTERM while its agent loads stops once loaded, before it does any work`, { timeout: 60_000 }, async () => {
      const dir = join(db.path, '..');
      const gate = join(dir, `load-gate-${i}`);
      const loading = join(dir, `loading-${i}`);
      const env = { STEPWISE_DB: db.path, SLOW_AGENT_GATE: gate, SLOW_AGENT_LOADING: loading, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: 'a-token-long-enough-to-serve' };
      const line = [process.execPath, BIN, ...command, '--agent', SLOW_AGENT];
      const child = wrap.length ? wrapped(['unshare', ...wrap, ...line], env) : wrapped(line, env);
      try {
        const deadline = Date.now() + 30_000;
        while (!existsSync(loading) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        const pid = wrap.length ? childOf(child.child.pid!) : child.child.pid!;
        process.kill(pid, 'SIGTERM');
        await child.line(/stopping \(SIGTERM\)/);
        writeFileSync(gate, '');
        // Taken after the load, the signal killed the process (a signal's exit, no line) and, sent to PID 1,
        // was lost: the worker went on to be ready and work the queue, `run` to start and work its run.
        const [code, signal] = await once(child.child, 'exit') as [number | null, string | null];
        expect({ code, signal }).toEqual({ code: 0, signal: null });
        expect(child.out()).toMatch(said);
        expect(child.out()).not.toMatch(unsaid);
      } finally {
        child.child.kill('SIGKILL');
      }
    });
  }

  it('serve, sent SIGTERM with a request in hand whose client never sends its body, stops within its grace', { timeout: 60_000 }, async () => {
    const port = await freePort();
    const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: 'a-token-long-enough-to-serve' });
    const client = new Socket();
    try {
      await server.line(/^serving agent /);
      // An authorized POST whose headers promise 100 bytes, of which one comes: the request stays in hand.
      client.connect(port, '127.0.0.1');
      await once(client, 'connect');
      client.write(`POST /runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a-token-long-enough-to-serve\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{`);
      await new Promise((r) => setTimeout(r, 500));
      server.child.kill('SIGTERM');
      // Without the grace, serve waits for the body for good, and the test's own timeout ends it.
      const [code] = await once(server.child, 'exit') as [number | null];
      expect(code).toBe(0);
      expect(server.out().trim().split('\n').at(-1)).toBe('stopped');
    } finally {
      client.destroy();
      server.child.kill('SIGKILL');
    }
  });

  it('serve, sent SIGTERM with a long poll in hand, answers it with the run as it stands and stops, where it cut it unanswered and then logged an error', { timeout: 60_000 }, async () => {
    const port = await freePort();
    const token = 'a-token-long-enough-to-serve';
    const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: token };
    const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], env);
    try {
      await server.line(/^serving agent /);
      const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
      // No worker: the run stays at version 1, and the poll would wait its 20 seconds.
      expect((await fetch(`http://127.0.0.1:${port}/runs`, { method: 'POST', headers, body: JSON.stringify({ goal: 'g', runId: 'long-poll-at-stop' }) })).status).toBe(201);
      const polled = fetch(`http://127.0.0.1:${port}/runs/long-poll-at-stop?after=1&waitSeconds=20`, { headers })
        .then(async (r) => ({ status: r.status, body: await r.json() as { run: { version: number } } }), (error: unknown) => ({ status: 0, body: String(error) }));
      await new Promise((r) => setTimeout(r, 500));
      server.child.kill('SIGTERM');
      expect(await polled).toMatchObject({ status: 200, body: { run: { version: 1 } } });
      const [code] = await once(server.child, 'exit') as [number | null];
      expect(code).toBe(0);
      expect(server.out().trim().split('\n').at(-1)).toBe('stopped');
      // The poll's looks went on after serve closed the file: "The database connection is not open".
      expect(server.err()).toBe('');
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const SLOW_AGENT = join(ROOT, 'test/support/slow-import-agent.ts');

function received(path: string, key: string): boolean {
  try {
    const effects = new Database(path, { fileMustExist: true });
    try {
      return Boolean(effects.prepare('SELECT 1 FROM received WHERE key = ?').get(key));
    } finally {
      effects.close();
    }
  } catch {
    return false; // not made yet
  }
}

/** The worker's process under `unshare --fork`: the one child of unshare's. */
function childOf(pid: number): number {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
  return children[0]!;
}

/** runStepwise's Running for a command line of any program. */
function wrapped(command: string[], env: Record<string, string>): ReturnType<typeof runStepwise> {
  const child = spawn(command[0]!, command.slice(1), { cwd: ROOT, env: { ...process.env, ...env } });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => { out += d; });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  return {
    child, out: () => out, err: () => err,
    line: async (pattern) => {
      while (!out.split('\n').some((l) => pattern.test(l))) {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`exited before ${pattern}: ${out}\n${err}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      return out.split('\n').find((l) => pattern.test(l))!;
    },
    stop: async () => { child.kill('SIGKILL'); },
  };
}
