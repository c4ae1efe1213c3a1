import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

/**
 * A tool that never returns, in a real `stepwise run` process: each try ends at the tool's timeoutMs, the
 * run fails at the third with the reason, and the command exits. Before, the process waited for good.
 */
const AGENT = join(ROOT, 'test/support/hang-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());

describe('a tool that hangs, from the terminal', () => {
  it('stepwise run ends the run as failed, with the reason, after 3 tries', { timeout: 120_000 }, async () => {
    const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', HANG_TIMEOUT_MS: '200' };
    const r = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'wait for the answer', '--run-id', 'hang-1'], env);
    // Nothing on stderr at warn but the run's failure, which an operator's log alerts on.
    expect(r.err.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>)).toEqual([expect.objectContaining({
      level: 'warn', event: 'checkpoint', runId: 'hang-1', status: 'failed', msg: 'run hang-1 failed: step 1 failed 3 times; last error: tool hang did not finish within 200 ms (its timeoutMs)',
    })]);
    const lines = r.out.trim().split('\n');
    expect(lines.filter((l) => l.includes('attempt'))).toEqual([
      'run hang-1 v2  step 1 attempt 1 failed: tool hang did not finish within 200 ms (its timeoutMs) (will retry in 1 s)',
      'run hang-1 v3  step 1 attempt 2 failed: tool hang did not finish within 200 ms (its timeoutMs) (will retry in 2 s)',
    ]);
    expect(lines.at(-1)).toBe('run hang-1: failed at version 4');
    const status = JSON.parse((await stepwiseCli(['status', 'hang-1', '--json'], env)).out) as { status: string; reason: string };
    expect(status).toMatchObject({ status: 'failed', reason: expect.stringContaining('tool hang did not finish within 200 ms (its timeoutMs)') });
  });
});
