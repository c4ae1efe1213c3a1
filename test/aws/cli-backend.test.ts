import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDb } from '../support/harness.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const effects = tempDb();
let aws: TestResources;

beforeAll(async () => { aws = await createTestResources('cli'); });
afterAll(() => { aws?.close(); effects.cleanup(); });

/** The CLI as a user runs it, against DynamoDB Local + fauxqs (endpoints from AWS_ENDPOINT_URL_* set by the test setup). */
function stepwise(...args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, [BIN, ...args, '--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl], {
    cwd: ROOT, env: { ...process.env, EFFECTS_DB: effects.path, PROCESS_AGENT_ROWS: '3', STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' },
  });
  let out = ''; let err = '';
  child.stdout.on('data', (d: Buffer) => { out += d; });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  return new Promise((r) => child.on('exit', (code) => r({ code, out, err })));
}

describe('the stepwise command on the AWS backend', () => {
  it('start, worker, status and history work against DynamoDB and SQS', async () => {
    const started = await stepwise('start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'aws-cli-1');
    expect(started.err).toBe('');
    expect(started.out).toContain('started run aws-cli-1');
    const again = await stepwise('start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'aws-cli-1');
    expect(again.out).toContain('run aws-cli-1 already exists (status running, version 1): nothing changed');

    const worker = await stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '2500');
    expect(worker.code).toBe(0);
    expect(worker.out).toContain('run aws-cli-1 v5  completed after 3 steps: wrote 3 rows');

    const status = JSON.parse((await stepwise('status', 'aws-cli-1', '--json')).out) as { status: string; version: number; steps: unknown[] };
    expect(status).toMatchObject({ status: 'completed', version: 5 });
    expect(status.steps).toHaveLength(3);
    const history = JSON.parse((await stepwise('history', 'aws-cli-1', '--json')).out) as { version: number; step: number; idempotencyKey?: string }[];
    expect(history.map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
    expect(history.filter((h) => h.idempotencyKey).map((h) => h.idempotencyKey)).toEqual(['aws-cli-1/step-1', 'aws-cli-1/step-2', 'aws-cli-1/step-3']);
    const table = await stepwise('status');
    expect(table.out).toMatch(/aws-cli-1\s+completed\s+3\s+5/);
  });

  it('run is local only, and a missing table is a clear error', async () => {
    const run = await stepwise('run', '--agent', AGENT, '--goal', 'x');
    expect(run.code).toBe(2);
    expect(run.err).toContain('works a run in this process on the local backend');
    const child = spawn(process.execPath, [BIN, 'status', '--backend', 'aws'], { cwd: ROOT, env: { ...process.env, TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '' } });
    let err = '';
    child.stderr.on('data', (d: Buffer) => { err += d; });
    const code = await new Promise((r) => child.on('exit', r));
    expect(code).toBe(2);
    expect(err).toContain('the AWS backend needs TABLE_NAME, BUCKET_NAME, QUEUE_URL');
  });
});
