import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { freePort } from '../support/aws-servers.ts';
import { tempDb } from '../support/harness.ts';
import { outboxEmails } from '../support/outbox.ts';
import { runStepwise, type Running } from '../support/processes.ts';

/**
 * `npm run local-aws`, as a newcomer runs it: its own DynamoDB Local and fauxqs, the table, bucket and
 * queue, and a file of exports that points the CLI at them. The CLI then works a run on that backend.
 */
const dir = tempDb();
afterAll(() => dir.cleanup());

/** `npm run local-aws -- <args>` as a process of its own; `ready` once it has printed what to source. */
function startLocalAws(args: string[]): { child: ChildProcess; out(): string; err(): string; ready: Promise<void>; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/local-aws.ts', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
  const ready = new Promise<void>((done, fail) => {
    child.stdout.on('data', (d: Buffer) => { out += d; if (out.includes('everything is in memory')) done(); });
    void exited.then((code) => fail(new Error(`local-aws exited with ${code} before it was ready:\n${out}\n${err}`)));
  });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  return { child, out: () => out, err: () => err, ready, exited };
}

/** The exports as `source` reads them in bash: the names the file sets, with the values the shell gave them. */
function sourceEnvFile(file: string): Record<string, string> {
  const lines = readFileSync(file, 'utf8').trim().split('\n');
  // The first line says whose the file is; `source` skips it.
  expect(lines[0]).toMatch(/^# npm run local-aws, pid \d+: removed when it stops$/);
  const names = lines.slice(1).map((line) => {
    const m = /^export ([A-Z0-9_]+)=/.exec(line);
    if (!m) throw new Error(`not an export line: ${line}`);
    return m[1]!;
  });
  const shell = spawnSync('bash', ['-c', 'source "$1" && env -0', '_', file], { encoding: 'utf8', env: {} });
  expect(shell.status, shell.stderr).toBe(0);
  const all = new Map(shell.stdout.split('\0').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)] as const));
  return Object.fromEntries(names.map((name) => [name, all.get(name) ?? '']));
}

describe('npm run local-aws', () => {
  it('starts the servers, makes the resources, writes the exports; the CLI works a run there; SIGTERM stops it all', { timeout: 180_000 }, async () => {
    // A folder whose name the shell must quote: the exports still read back as written.
    const home = join(dir.path, '..', "it's here");
    const envFile = join(home, 'local-aws.env');
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/local-aws.ts', '--write-env', envFile], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => { out += d; });
    child.stderr.on('data', (d: Buffer) => { err += d; });
    const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
    let cliEnv: Record<string, string> = {};
    let server: Running | undefined;
    try {
      const deadline = Date.now() + 120_000;
      while (!out.includes('everything is in memory') && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      expect(err).toBe('');
      expect(out).toMatch(/^local AWS servers ready: DynamoDB Local http:\/\/127\.0\.0\.1:\d+, SQS and S3 \(fauxqs\) http:\/\/127\.0\.0\.1:\d+$/m);
      expect(out).toContain(`  source '${envFile.replace("'", `'\\''`)}'`);

      const env = sourceEnvFile(envFile);
      expect(env).toMatchObject({ STEPWISE_BACKEND: 'aws', TABLE_NAME: 'stepwise', BUCKET_NAME: 'stepwise-blobs', AWS_REGION: 'us-east-1' });
      expect(env.QUEUE_URL).toMatch(/\/stepwise\.fifo$/);
      // The servers are this script's own, not the test setup's.
      expect(env.AWS_ENDPOINT_URL_DYNAMODB).not.toBe(process.env.AWS_ENDPOINT_URL_DYNAMODB);

      cliEnv = { ...env, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', EFFECTS_DB: join(dir.path, '..', 'effects.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_STACK: '' };
      const cli = (...args: string[]) => stepwiseCli(args, cliEnv);
      const agent = join(ROOT, 'test/support/process-agent.ts');
      const started = await cli('start', '--agent', agent, '--goal', 'write 2 rows', '--run-id', 'local-aws-1');
      expect(started.err).toBe('');
      expect(started.out).toContain('started run local-aws-1');
      const worker = await cli('worker', '--agent', agent, '--idle-exit-ms', '2000');
      expect(worker.out).toContain('run local-aws-1 v4  completed after 2 steps');
      expect(JSON.parse((await cli('status', 'local-aws-1', '--json')).out)).toMatchObject({ status: 'completed', version: 4 });

      // An approval the AWS way, with no SES and no Secrets Manager: the worker writes the email to the
      // outbox and signs its link with the session's key file; `serve --backend aws` checks it.
      expect(env).toMatchObject({ STEPWISE_OUTBOX: resolve(home, 'local-aws-outbox'), STEPWISE_SIGNING_KEY_FILE: resolve(home, 'local-aws-signing.key'), STEPWISE_PUBLIC_URL: 'http://127.0.0.1:8787' });
      expect(statSync(env.STEPWISE_SIGNING_KEY_FILE!).mode & 0o777).toBe(0o600);
      const approvalAgent = join(ROOT, 'test/support/approval-agent.ts');
      expect((await cli('start', '--agent', approvalAgent, '--goal', 'drop the old table', '--run-id', 'local-aws-ap')).code).toBe(0);
      const untilWait = await cli('worker', '--agent', approvalAgent, '--idle-exit-ms', '2000');
      expect(untilWait.out).toMatch(/run local-aws-ap v\d+ {2}step 2 {2}waiting for approval by ops@example\.com/);
      const [email] = outboxEmails(env.STEPWISE_OUTBOX!);
      expect(email).toMatchObject({ to: 'ops@example.com' });
      expect(email!.link).toMatch(/^http:\/\/127\.0\.0\.1:8787\/approvals\/v1\./);
      const port = await freePort();
      server = runStepwise(['serve', '--agent', approvalAgent, '--port', String(port), '--db', join(dir.path, '..', 'serve', 'x.db')], cliEnv);
      await server.line(new RegExp(`^serving agent approval-e2e on http://127\\.0\\.0\\.1:${port} \\(.*approval emails in ${env.STEPWISE_OUTBOX!.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\)$`));
      // The link names the default port; this test's server listens on a free one.
      const link = email!.link.replace('127.0.0.1:8787', `127.0.0.1:${port}`);
      expect((await fetch(link)).status).toBe(200);
      const forged = link.slice(0, -2) + (link.endsWith('AA') ? 'BB' : 'AA');
      expect((await fetch(forged, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) })).status).toBe(403);
      const approved = await fetch(link, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) });
      expect(approved.status).toBe(200);
      expect(await approved.text()).toContain('Approved. The run continues.');
      const finish = await cli('worker', '--agent', approvalAgent, '--idle-exit-ms', '2000');
      // Approved, the drop runs, once, and the run completes.
      expect(finish.out).toMatch(/run local-aws-ap v\d+ {2}step 3 {2}drop_table {2}ok: \{"applied":true,"dropped":"old_rows"\}/);
      expect(finish.out).toMatch(/run local-aws-ap v\d+ {2}completed after 3 steps/);
    } finally {
      await server?.stop();
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    // The file pointed at servers that are gone: it goes with them, and so do the emails and the key.
    expect(existsSync(envFile)).toBe(false);
    expect(existsSync(join(home, 'local-aws-outbox'))).toBe(false);
    expect(existsSync(join(home, 'local-aws-signing.key'))).toBe(false);
  });

  it('a second session on a file a running one holds is refused; one on a file of its own beside it has its own key and emails, and stopping it leaves the first one\'s', { timeout: 180_000 }, async () => {
    const home = join(dir.path, '..', 'two sessions');
    const first = join(home, 'local-aws.env');
    const second = join(home, 'second.env');
    // A file left by a session that died without removing it (SIGKILL): its process is gone, so it is taken over.
    mkdirSync(home, { recursive: true });
    writeFileSync(first, `# npm run local-aws, pid ${spawnSync('true').pid}: removed when it stops\nexport AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:1\n`);
    const a = startLocalAws(['--write-env', first]);
    let again: ReturnType<typeof startLocalAws> | undefined;
    let b: ReturnType<typeof startLocalAws> | undefined;
    try {
      await a.ready;
      const written = readFileSync(first, 'utf8');
      expect(written).toMatch(new RegExp(`^# npm run local-aws, pid ${a.child.pid}: removed when it stops\n`));
      const keyA = readFileSync(join(home, 'local-aws-signing.key'), 'utf8');

      // Both would write the file, the key and the outbox, and whichever stopped first would remove the other's.
      again = startLocalAws(['--write-env', first]);
      expect(await Promise.race([again.exited, again.ready.then(() => 'started')])).toBe(2);
      expect(again.err()).toBe(`local-aws: ${first} belongs to another npm run local-aws (pid ${a.child.pid}), still running: use that one, stop it first, or give this one a file of its own (-- --write-env <path>)\n`);
      expect(readFileSync(first, 'utf8')).toBe(written);

      b = startLocalAws(['--write-env', second]);
      await b.ready;
      const envB = sourceEnvFile(second);
      expect(envB).toMatchObject({ STEPWISE_SIGNING_KEY_FILE: join(home, 'second-signing.key'), STEPWISE_OUTBOX: join(home, 'second-outbox') });
      expect(envB.AWS_ENDPOINT_URL_DYNAMODB).not.toBe(sourceEnvFile(first).AWS_ENDPOINT_URL_DYNAMODB);
      b.child.kill('SIGTERM');
      expect(await b.exited).toBe(0);
      expect(existsSync(second)).toBe(false);
      expect(existsSync(join(home, 'second-signing.key'))).toBe(false);
      // The first session's file and key are as it wrote them.
      expect(readFileSync(first, 'utf8')).toBe(written);
      expect(readFileSync(join(home, 'local-aws-signing.key'), 'utf8')).toBe(keyA);
    } finally {
      for (const session of [again, b, a]) session?.child.kill('SIGTERM');
    }
    expect(await a.exited).toBe(0);
    expect(existsSync(first)).toBe(false);
  });

  it('SIGTERM to `npm run local-aws` (a supervisor, kill <pid>) stops the servers and removes the file, not only npm', { timeout: 180_000 }, async () => {
    const envFile = join(dir.path, '..', 'npm', 'local-aws.env');
    // A group of its own, so whatever npm leaves running can be found and stopped at the end.
    const npm = spawn('npm', ['run', '--silent', 'local-aws', '--', '--write-env', envFile], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    npm.stdout.on('data', (d: Buffer) => { out += d; });
    const exited = new Promise<void>((done) => npm.on('exit', () => done()));
    try {
      while (!out.includes('everything is in memory') && npm.exitCode === null) await new Promise((r) => setTimeout(r, 200));
      const env = sourceEnvFile(envFile);
      npm.kill('SIGTERM');
      await exited;
      // npm hands the signal to its script's shell, and sh does not pass it on to a command it runs: the
      // script, Java and fauxqs went on, still answering, and the file still named them.
      expect(existsSync(envFile)).toBe(false);
      await expect(fetch(env.AWS_ENDPOINT_URL_DYNAMODB!)).rejects.toThrow();
      await expect(fetch(env.AWS_ENDPOINT_URL_SQS!)).rejects.toThrow();
    } finally {
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        // the group is gone already
      }
    }
  });

  it('a mistyped option stops it before any server starts, with the usage; --help prints it', () => {
    const typo = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/local-aws.ts', '--write-evn', 'x'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(typo.status).toBe(2);
    expect(typo.stderr).toBe("local-aws: Unknown option '--write-evn'\nusage: npm run local-aws [-- --write-env <path>]   (the exports go to .stepwise/local-aws.env by default)\n");
    expect(typo.stdout).toBe('');
    const help = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/local-aws.ts', '--help'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run local-aws/);
  });
});
