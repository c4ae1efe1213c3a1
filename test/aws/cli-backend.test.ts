import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startCli, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const effects = tempDb();
let aws: TestResources;

beforeAll(async () => { aws = await createTestResources('cli'); });
afterAll(() => { aws?.close(); effects.cleanup(); });

/** The CLI against DynamoDB Local + fauxqs (endpoints from AWS_ENDPOINT_URL_* set by the test setup). */
const flags = () => ['--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl];
const ENV = { EFFECTS_DB: effects.path, PROCESS_AGENT_ROWS: '3', STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };
function stepwise(...args: string[]) {
  return stepwiseCli([...args, ...flags()], ENV);
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

    // A fork names the command that works it here: `stepwise run` is refused on this backend.
    const forked = await stepwise('fork', 'aws-cli-1', '--from-step', '2', '--run-id', 'aws-cli-1-f', '--agent', AGENT);
    const flags = `--backend aws --table ${aws.tableName} --bucket ${aws.bucketName} --queue-url ${aws.queueUrl}`;
    expect(forked.out.trim()).toBe(`forked run aws-cli-1-f from aws-cli-1 at step 2 (version 5); \`stepwise worker --agent ${AGENT} ${flags}\` works it`);
    const fromFork = await stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '2500');
    expect(fromFork.out).toMatch(/run aws-cli-1-f v\d+ {2}completed after 3 steps/);

    // Deleted, it is gone from the table; the fork made from it stays.
    const deleted = await stepwise('delete', 'aws-cli-1');
    expect(deleted.code, deleted.err).toBe(0);
    expect(deleted.out).toMatch(/^run aws-cli-1 \(completed at version 5\) deleted: its checkpoints, step records and idempotency records;/);
    const gone = await stepwise('status', 'aws-cli-1');
    expect(gone.code).toBe(2);
    expect(gone.err).toContain('unknown run: aws-cli-1');
    expect((await stepwise('status')).out).not.toMatch(/aws-cli-1\s/);
    expect((await stepwise('status', 'aws-cli-1-f')).out).toContain('completed');
    expect((await stepwise('delete', 'aws-cli-1')).err).toContain('unknown run: aws-cli-1');
  });

  it('watch follows a run that another process works on DynamoDB and SQS, to its end', { timeout: 60_000 }, async () => {
    expect((await stepwise('start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'aws-watch-1')).code).toBe(0);
    // Its first look taken before the worker starts: every step comes after it.
    const watching = startCli(['watch', 'aws-watch-1', ...flags()], ENV);
    expect(await watching.firstLine).toBe('run aws-watch-1 v1  running at step 0');
    expect((await stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '2500')).code).toBe(0);
    const watched = await watching.done;
    expect(watched.code, watched.err).toBe(0);
    const out = watched.out;
    for (const step of [1, 2, 3]) expect(out).toMatch(new RegExp(`^run aws-watch-1 v\\d+ {2}step ${step} {2}write_row {2}ok: .*key aws-watch-1/step-${step}\\)$`, 'm'));
    expect(out.trim().split('\n').at(-1)).toMatch(/^run aws-watch-1 v5 {2}completed after 3 steps: wrote 3 rows/);
  });

  it('run is local only, and a missing table is a clear error', async () => {
    const run = await stepwise('run', '--agent', AGENT, '--goal', 'x');
    expect(run.code).toBe(2);
    expect(run.err).toContain('works a run in this process on the local backend');
    const missing = await stepwiseCli(['status', '--backend', 'aws'], { TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '' });
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('the AWS backend needs TABLE_NAME (environment)');
  });

  it('a worker asked for a visibility past SQS\'s 12 hours is refused before it says it is ready', async () => {
    // It said ready, then its first receive refused: a supervisor counted up a worker that stopped at once.
    const worker = await stepwise('worker', '--agent', AGENT, '--visibility-ms', String(12 * 3_600_000 + 1), '--idle-exit-ms', '500');
    expect(worker.err).toBe('stepwise: a visibility timeout on SQS is at most 12 hours (43200000 ms), not 43200001 ms\n');
    expect(worker.code).toBe(2);
    expect(worker.out).toBe('');
  });

  it('prune sweeps the bucket of blobs nothing refers to; TTL does the rest, so --older-than-days is refused', async () => {
    const pruned = await stepwise('prune');
    expect(pruned.code).toBe(0);
    expect(pruned.out).toMatch(/^swept 0 unreferenced blobs \(\d+ referenced, 0 younger than a day kept\); DynamoDB TTL removes older checkpoint versions$/m);
    const refused = await stepwise('prune', '--older-than-days', '3');
    expect(refused.code).toBe(2);
    expect(refused.err).toContain('--older-than-days is for the local backend');
  });

  it('drift reads the running and waiting runs from the table: none here, so it passes', async () => {
    const drift = await stepwise('drift', '--agent', AGENT);
    expect(drift.code).toBe(0);
    expect(drift.out).toContain('checked 0 running or waiting runs of agent process-rows: this code and agent can resume every one');
  });
});
