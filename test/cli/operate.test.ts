import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
const EFFECTS = db.path.replace(/stepwise\.db$/, 'effects.db');
afterAll(() => db.cleanup());

function stepwise(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: ROOT, encoding: 'utf8', timeout: 60_000,
    env: { ...process.env, STEPWISE_DB: db.path, EFFECTS_DB: EFFECTS, PROCESS_AGENT_ROWS: '3', STEPWISE_LOG_FORMAT: 'json', ...env },
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

const work = (env: Record<string, string> = {}) => {
  const w = stepwise(['worker', '--agent', AGENT, '--idle-exit-ms', '300'], env);
  expect(w.code).toBe(0);
  return w;
};

function effects(): { key: string; count: number }[] {
  const d = new Database(EFFECTS, { readonly: true });
  try {
    return d.prepare('SELECT key, COUNT(*) AS count FROM received GROUP BY key ORDER BY key').all() as { key: string; count: number }[];
  } finally {
    d.close();
  }
}

const json = (text: string) => JSON.parse(text) as Record<string, any>;

/** A worker's hold on a run's message, as while it works a step; let go, the message is visible at once. */
async function holdMessage(runId: string): Promise<{ letGo(): Promise<void> }> {
  const runtime = openLocalRuntime({ dbPath: db.path });
  const [delivery] = await runtime.queue.forRun(runId).receive({ visibilityMs: 600_000 });
  expect(delivery).toBeDefined();
  return { letGo: async () => { await runtime.queue.handBack(delivery!); runtime.close(); } };
}

// Each case runs a dozen CLI processes (about a second each, more on a loaded machine).
describe('operating runs from the command line', { timeout: 240_000 }, () => {
  it('show prints the goal and each step: tool, arguments, result, key, worker; --step, --full and --json', () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-1']).code).toBe(0);
    work({ PROCESS_AGENT_LARGE_AT: '2', PROCESS_AGENT_TOKENS: '1000' });
    const shown = stepwise(['show', 'op-1']);
    expect(shown.code).toBe(0);
    expect(shown.out).toContain('goal     write 3 rows');
    expect(shown.out).toContain('status   completed');
    expect(shown.out).toMatch(/step 1 {2}write_row {2}ok {2}worker \S+-\d+ {2}tokens 1000 {2}cost \$0\.0040/);
    expect(shown.out).toContain('  key     op-1/step-1');
    expect(shown.out).toContain('  input   {"row":1}');
    expect(shown.out).toContain('  result  {"applied":true}');
    // A large output is an excerpt plus its reference until --full fetches it from the blob store.
    expect(shown.out).toMatch(/stored by ref sha256:[0-9a-f]+; --full shows it/);
    expect(shown.out).not.toContain('end of log 2');
    const full = stepwise(['show', 'op-1', '--full']);
    expect(full.out).toContain('end of log 2');

    const at = stepwise(['show', 'op-1', '--step', '1']);
    expect(at.out).toContain('state after step 1 of 3 (the run is now completed at version 5)');
    expect(at.out).toContain('step 1  write_row');
    expect(at.out).not.toContain('step 2  write_row');
    const view = json(stepwise(['show', 'op-1', '--step', '2', '--json', '--full']).out);
    expect(view).toMatchObject({ runId: 'op-1', atStep: 2, status: 'completed', usage: { inputTokens: 2000 }, cost: { priced: true } });
    expect(view.steps).toHaveLength(2);
    expect(view.steps[1].output).toContain('end of log 2');
    expect(view.cost.usd).toBeCloseTo(0.008, 6);

    const beyond = stepwise(['show', 'op-1', '--step', '4']);
    expect(beyond.code).toBe(2);
    expect(beyond.err).toContain('run op-1 has 3 completed steps; there is no step 4');
  });

  it('fork starts a run from a step: nothing before it is redone, its effects use its own keys', () => {
    const before = effects();
    const forked = stepwise(['fork', 'op-1', '--from-step', '1', '--run-id', 'op-1-f', '--goal', 'write 3 rows again']);
    expect(forked.code).toBe(0);
    expect(forked.out.trim()).toBe('forked run op-1-f from op-1 at step 1 (version 5); `stepwise run --agent <path> --run-id op-1-f` or a worker works it');
    work();
    const after = effects();
    expect(after.filter((e) => e.key.startsWith('op-1/'))).toEqual(before.filter((e) => e.key.startsWith('op-1/')));
    expect(after.filter((e) => e.key.startsWith('op-1-f/')).map((e) => e.key)).toEqual(['op-1-f/step-2', 'op-1-f/step-3']);
    const status = stepwise(['status', 'op-1-f']);
    expect(status.out).toContain('status   completed');
    expect(status.out).toContain('goal     write 3 rows again');
    expect(status.out).toContain('forked   from op-1 at step 1 (version 5)');
    expect(stepwise(['history', 'op-1-f']).out).toMatch(/^forked from op-1 at step 1 \(version 5\)\n/);
    expect(json(stepwise(['status', 'op-1-f', '--json']).out).forkedFrom).toEqual({ runId: 'op-1', step: 1, version: 5 });
    const again = stepwise(['fork', 'op-1', '--from-step', '1', '--run-id', 'op-1-f']);
    expect(again.code).toBe(0);
    expect(again.out).toContain('run op-1-f already exists, forked from op-1 at step 1: nothing changed');
    const otherGoal = stepwise(['fork', 'op-1', '--from-step', '1', '--run-id', 'op-1-f', '--goal', 'something else']);
    expect(otherGoal.out).toContain('run op-1-f already exists, forked from op-1 at step 1: nothing changed (its goal is not the one given: --run-id with another id makes another fork)');
    const defaultId = stepwise(['fork', 'op-1', '--from-step', '3']);
    expect(defaultId.out).toMatch(/forked run op-1-fork-3-[0-9a-f]{6} from op-1 at step 3/);
    expect(stepwise(['fork', 'op-1']).err).toContain('--from-step');
  });

  it('cancel stops a running run at its next step boundary; an ended run cannot be cancelled', async () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-c']).code).toBe(0);
    // A worker has taken the run's message (as while it works a step): the cancel is left to it.
    const held = await holdMessage('op-c');
    const cancelled = stepwise(['cancel', 'op-c', '--as', 'ops@example.com', '--reason', 'not needed']);
    expect(cancelled.code).toBe(0);
    expect(cancelled.out).toMatch(/^cancel requested for run op-c: it stops at its next step boundary \(a step running now finishes first\), when a worker takes its next message; by ops@example\.com at \S+: not needed$/m);
    expect(stepwise(['status', 'op-c']).out).toMatch(/cancel   requested by ops@example\.com at .*: not needed/);
    // The table of runs says it too: the run is still running until a worker applies the cancel.
    expect(stepwise(['status']).out).toMatch(/^op-c +running, cancel requested /m);
    await held.letGo();
    work();
    expect(stepwise(['status']).out).toMatch(/^op-c +cancelled /m);
    const status = stepwise(['status', 'op-c']);
    expect(status.out).toMatch(/status {3}cancelled \(cancelled by ops@example\.com at .*: not needed\)/);
    expect(effects().some((e) => e.key.startsWith('op-c/'))).toBe(false);
    expect(stepwise(['cancel', 'op-c']).out).toContain('run op-c is already cancelled');
    const ended = stepwise(['cancel', 'op-1']);
    expect(ended.code).toBe(2);
    expect(ended.err).toContain('run op-1 has already ended (completed): nothing to cancel');
  });

  it('cancel of a running run no worker is working (none started) applies at once', () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-idle']).code).toBe(0);
    const cancelled = stepwise(['cancel', 'op-idle', '--as', 'ops@example.com', '--reason', 'not needed']);
    expect(cancelled.code).toBe(0);
    expect(cancelled.out.trim()).toBe('run op-idle cancelled at version 2: no worker was working it, so nothing was running');
    expect(stepwise(['status', 'op-idle']).out).toMatch(/status {3}cancelled \(cancelled by ops@example\.com at .*: not needed\)/);
    // Nothing is left on the queue for a worker to find.
    work();
    expect(effects().some((e) => e.key.startsWith('op-idle/'))).toBe(false);
    expect(json(stepwise(['history', 'op-idle', '--json']).out)).toHaveLength(2);
  });

  it('retry continues a capped run with a raised cap', () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-r', '--step-cap', '1']).code).toBe(0);
    work();
    expect(stepwise(['status', 'op-r']).out).toContain('status   capped');
    const retried = stepwise(['retry', 'op-r']);
    expect(retried.code).toBe(0);
    expect(retried.out).toContain('retried run op-r (it was capped): running at version 4, step cap 11');
    work();
    expect(stepwise(['status', 'op-r']).out).toContain('status   completed');
    const done = stepwise(['retry', 'op-r']);
    expect(done.code).toBe(2);
    expect(done.err.trim()).toMatch(/^stepwise: run op-r is completed; only a failed, capped, over-budget run can be retried; fork it from step \d+ to go on from its state$/);
  });

  it('a token budget stops a run as over-budget; retry with a raised budget continues it', () => {
    const env = { PROCESS_AGENT_TOKENS: '100' };
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-b', '--budget-tokens', '150'], env).code).toBe(0);
    work(env);
    const over = stepwise(['status', 'op-b']);
    expect(over.out).toContain('status   over-budget (token budget of 150 reached: 200 tokens used)');
    expect(over.out).toContain('budget   150 tokens');
    expect(stepwise(['status', '--status', 'over-budget']).out).toMatch(/op-b\s+over-budget\s+2/);
    const refused = stepwise(['retry', 'op-b']);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain('would stop again at once');
    expect(stepwise(['retry', 'op-b', '--budget-tokens', '1000']).out).toContain('retried run op-b (it was over-budget): running at version 5, step cap 60, budget 1000 tokens');
    work(env);
    expect(stepwise(['status', 'op-b']).out).toContain('status   completed');
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'x', '--budget-usd', 'lots']).err).toContain('--budget-usd must be a number above 0');
  });

  it('a step cap or budget given for a run that exists is not dropped in silence: start says so, run works nothing', () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-l', '--budget-tokens', '500']).code).toBe(0);
    const again = stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-l', '--budget-tokens', '500']);
    expect(again.out.trim()).toBe('run op-l already exists (status running, version 1): nothing changed');
    const other = stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-l', '--step-cap', '1']);
    expect(other.code).toBe(0);
    expect(other.out).toContain('nothing changed (--step-cap and --budget-* apply only to a new run: it keeps step cap 60 and budget 500 tokens;');
    // Worked on, the run would go past the cap asked for.
    const run = stepwise(['run', '--agent', AGENT, '--run-id', 'op-l', '--step-cap', '1', '--budget-tokens', '100']);
    expect(run.code).toBe(2);
    expect(run.err).toContain('stepwise: run op-l exists, so it was not worked: --step-cap and --budget-* apply only to a new run: it keeps step cap 60 and budget 500 tokens;');
    expect(stepwise(['status', 'op-l']).out).toContain('step     0 of at most 60, version 1');
    // Another goal is not taken either: said by start, refused by run.
    const goal = stepwise(['start', '--agent', AGENT, '--goal', 'write 9 rows', '--run-id', 'op-l']);
    expect(goal.out.trim()).toBe('run op-l already exists (status running, version 1): nothing changed (--goal applies only to a new run: it keeps its goal "write 3 rows"; `stepwise fork` with --goal starts from its steps with another)');
    expect(stepwise(['run', '--agent', AGENT, '--run-id', 'op-l', '--goal', 'write 9 rows']).err).toContain('stepwise: run op-l exists, so it was not worked: --goal applies only to a new run');
    expect(stepwise(['run', '--agent', AGENT, '--run-id', 'op-l', '--budget-tokens', '500']).code).toBe(0);
    expect(stepwise(['status', 'op-l']).out).toContain('status   completed');
    // Completed, it can be forked, not retried: the hint says only what works.
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'op-l', '--step-cap', '5']).out)
      .toContain('it keeps step cap 60 and budget 500 tokens; `stepwise fork` sets them)');
  });
});
