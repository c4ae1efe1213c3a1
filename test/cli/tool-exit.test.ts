import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

/**
 * A tool that calls process.exit(0) in a real `stepwise worker` or `run` process. Before, the worker ended
 * with code 0 and not a line (a supervisor that restarts a failed worker took it for a clean stop), and
 * `run` with 0, which says the run completed.
 */
const AGENT = join(ROOT, 'test/support/exit-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };

const errorLines = (err: string) => err.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);

describe('a tool that ends its process', () => {
  it('stepwise worker exits 1, not 0, naming the run it left in the middle of a step', { timeout: 60_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'leave', '--run-id', 'exit-1'], env)).code).toBe(0);
    const r = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '5000'], env);
    expect(r.code).toBe(1);
    expect(errorLines(r.err)).toEqual([expect.objectContaining({
      level: 'error', event: 'exited-in-step', code: 0, runs: ['exit-1'],
      msg: expect.stringMatching(/^worker \S+ exited \(code 0\) in the middle of a step of run exit-1, which is tried again once its message's visibility timeout has passed; a tool that calls process.exit/),
    })]);
  });

  it('stepwise run exits 1, not 0 (which says the run completed), and says how to continue the run', { timeout: 60_000 }, async () => {
    const r = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'leave', '--run-id', 'exit-2'], env);
    expect(r.code).toBe(1);
    expect(errorLines(r.err)).toEqual([expect.objectContaining({
      level: 'error', event: 'exited-in-step', code: 0, runs: ['exit-2'],
      msg: expect.stringContaining('stepwise run exited (code 0) before run exit-2 had ended; `stepwise run --agent'),
    })]);
    const status = JSON.parse((await stepwiseCli(['status', 'exit-2', '--json'], env)).out) as { status: string };
    expect(status.status).toBe('running');
  });
});
