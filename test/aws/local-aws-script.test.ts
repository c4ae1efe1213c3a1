import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

/**
 * `npm run local-aws`, as a newcomer runs it: its own DynamoDB Local and fauxqs, the table, bucket and
 * queue, and a file of exports that points the CLI at them. The CLI then works a run on that backend.
 */
const dir = tempDb();
afterAll(() => dir.cleanup());

function parseEnvFile(text: string): Record<string, string> {
  return Object.fromEntries(text.trim().split('\n').map((line) => {
    const m = /^export ([A-Z0-9_]+)=(.*)$/.exec(line);
    if (!m) throw new Error(`not an export line: ${line}`);
    return [m[1]!, m[2]!];
  }));
}

describe('npm run local-aws', () => {
  it('starts the servers, makes the resources, writes the exports; the CLI works a run there; SIGTERM stops it all', { timeout: 180_000 }, async () => {
    const envFile = join(dir.path, '..', 'local-aws.env');
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/local-aws.ts', '--write-env', envFile], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => { out += d; });
    child.stderr.on('data', (d: Buffer) => { err += d; });
    const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
    try {
      const deadline = Date.now() + 120_000;
      while (!out.includes('everything is in memory') && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      expect(err).toBe('');
      expect(out).toMatch(/^local AWS servers ready: DynamoDB Local http:\/\/127\.0\.0\.1:\d+, SQS and S3 \(fauxqs\) http:\/\/127\.0\.0\.1:\d+$/m);
      expect(out).toContain(`  source ${envFile}`);

      const env = parseEnvFile(readFileSync(envFile, 'utf8'));
      expect(env).toMatchObject({ STEPWISE_BACKEND: 'aws', TABLE_NAME: 'stepwise', BUCKET_NAME: 'stepwise-blobs', AWS_REGION: 'us-east-1' });
      expect(env.QUEUE_URL).toMatch(/\/stepwise\.fifo$/);
      // The servers are this script's own, not the test setup's.
      expect(env.AWS_ENDPOINT_URL_DYNAMODB).not.toBe(process.env.AWS_ENDPOINT_URL_DYNAMODB);

      const cli = (...args: string[]) => stepwiseCli(args, { ...env, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', EFFECTS_DB: join(dir.path, '..', 'effects.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_STACK: '' });
      const agent = join(ROOT, 'test/support/process-agent.ts');
      const started = await cli('start', '--agent', agent, '--goal', 'write 2 rows', '--run-id', 'local-aws-1');
      expect(started.err).toBe('');
      expect(started.out).toContain('started run local-aws-1');
      const worker = await cli('worker', '--agent', agent, '--idle-exit-ms', '2000');
      expect(worker.out).toContain('run local-aws-1 v4  completed after 2 steps');
      expect(JSON.parse((await cli('status', 'local-aws-1', '--json')).out)).toMatchObject({ status: 'completed', version: 4 });
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    // The file pointed at servers that are gone: it goes with them.
    expect(existsSync(envFile)).toBe(false);
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
