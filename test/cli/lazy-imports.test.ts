import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { matching, tracedRun } from '../support/import-trace.ts';

/**
 * A command loads only what it uses: the SDKs, the HTTP app and the logger are large imports (most of the
 * old 0.8 s start), so `--help` and `status` must not pay for them. The start time itself is a figure of
 * bench/cli-start.ts; this checks the cause, by what the loader resolved.
 */
const db = tempDb();
afterAll(() => db.cleanup());
const HEAVY = ['@anthropic-ai/sdk', '@aws-sdk/', '@smithy/', 'hono', '@hono/', 'pino'];
const stepwise = (...args: string[]) => tracedRun(BIN, args, { cwd: ROOT, env: { STEPWISE_DB: db.path, ANTHROPIC_API_KEY: '', ANTHROPIC_API_KEY_SECRET_ID: '' } });

describe('what a command loads', () => {
  it('--help loads no SDK, no HTTP app, no logger, no database driver, no zod', () => {
    const help = stepwise('--help');
    expect(help.code).toBe(0);
    expect(help.out).toContain('usage:');
    expect(matching(help.packages, [...HEAVY, 'better-sqlite3', 'zod'])).toEqual([]);
  });

  it('status on the local backend loads the SQLite driver, and no SDK, HTTP app, logger or zod', () => {
    expect(stepwise('init').code).toBe(0);
    const status = stepwise('status');
    expect(status.code).toBe(0);
    expect(status.out.trim()).toBe('no runs');
    expect(status.packages.has('better-sqlite3')).toBe(true);
    expect(matching(status.packages, [...HEAVY, 'zod'])).toEqual([]);
  });

  it('run with the offline model loads neither the Anthropic SDK nor the AWS SDK', () => {
    const run = stepwise('run', '--agent', join(ROOT, 'test/support/js-agent.mjs'), '--goal', 'echo once');
    expect(run.code, run.err).toBe(0);
    expect(run.out).toContain('completed');
    expect(matching(run.packages, ['@anthropic-ai/sdk', '@aws-sdk/', 'hono', '@hono/'])).toEqual([]);
  });

  it('--backend aws loads the AWS SDK and still not the Anthropic SDK (the trace sees CommonJS packages too)', () => {
    const aws = tracedRun(BIN, ['status', '--backend', 'aws'], { cwd: ROOT, env: { TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '', STEPWISE_STACK: '' } });
    expect(aws.code).toBe(2);
    expect(aws.packages.has('@aws-sdk/client-dynamodb')).toBe(true);
    expect(matching(aws.packages, ['@anthropic-ai/sdk', 'hono', '@hono/'])).toEqual([]);
  });
});
