import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { completedStepLines, done, startMessagesServer, toolUse, type MessagesServer } from '../support/messages-server.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
let server: MessagesServer;

beforeAll(async () => {
  server = await startMessagesServer();
  // Claude's side of the conversation, decided from the prompt it is sent: three rows, then DONE.
  server.otherwise((request) => {
    const done3 = completedStepLines(request.userText).length;
    return done3 < 3 ? toolUse('write_row', { row: done3 + 1 }) : done('Wrote three rows.');
  });
});
afterAll(async () => { await server.stop(); db.cleanup(); });

function stepwise(...args: string[]) {
  return stepwiseAsking('claude-opus-5-5', ...args);
}

function stepwiseAsking(model: string, ...args: string[]) {
  return stepwiseCli(args, {
    STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), STEPWISE_LOG_LEVEL: 'warn',
    ANTHROPIC_API_KEY: 'sk-test-local', ANTHROPIC_BASE_URL: server.url, STEPWISE_MODEL: model,
  });
}

describe('the stepwise command with Claude (the local Messages API server)', () => {
  it('run uses Claude when ANTHROPIC_API_KEY is set, and says so', async () => {
    const r = await stepwise('run', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'claude-1');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain('model: Anthropic claude-opus-5-5');
    expect(r.out).toContain('completed after 3 steps: Wrote three rows.');
    expect(server.requests.every((q) => q.body?.model === 'claude-opus-5-5')).toBe(true);
  });

  it('status and history show per-step and total tokens and an estimated cost', async () => {
    const status = await stepwise('status', 'claude-1');
    expect(status.out).toMatch(/tokens {3}input \d+, output \d+, cache write \d+, cache read \d+; estimated \$\d+\.\d{4} \(\$\d+\.\d{4} without prompt caching/);
    expect(status.out).toMatch(/STEP\s+TOOL\s+RESULT\s+WORKER\s+TOKENS\s+COST/);
    const history = await stepwise('history', 'claude-1');
    const stepRows = history.out.split('\n').filter((l) => / write_row /.test(l));
    expect(stepRows).toHaveLength(3);
    for (const row of stepRows) expect(row).toMatch(/\s\d+\s+\$0\.\d{4}\s/);
    expect(history.out).toContain('total tokens: input');
    // --json gives each step's tokens, model and cost, the table's figures to the cent.
    const rows = JSON.parse((await stepwise('history', 'claude-1', '--json')).out) as { tool?: string; usage?: { inputTokens: number }; model?: string; usd?: number }[];
    const stepCosts = rows.filter((r) => r.tool).map((r) => [r.model, `$${r.usd!.toFixed(4)}`]);
    expect(stepCosts).toEqual(stepRows.map((row) => ['claude-opus-5-5', row.match(/\$0\.\d{4}/)![0]]));
    expect(rows.filter((r) => r.tool).every((r) => r.usage!.inputTokens > 0)).toBe(true);

    const json = JSON.parse((await stepwise('status', 'claude-1', '--json')).out) as { usage: Record<string, number>; steps: { usage: Record<string, number>; model: string }[]; cost: { usd: number; priced: boolean } };
    // The totals are the sum of what the server reported for every request of the run.
    const reported = server.requests.map((q) => q.usage!).filter(Boolean);
    expect(json.usage.inputTokens).toBe(reported.reduce((n, u) => n + u.input_tokens, 0));
    expect(json.usage.cacheReadTokens).toBe(reported.reduce((n, u) => n + u.cache_read_input_tokens, 0));
    expect(json.steps.map((s) => s.model)).toEqual(['claude-opus-5-5', 'claude-opus-5-5', 'claude-opus-5-5']);
    expect(json.cost.priced).toBe(true);
    expect(json.cost.usd).toBeGreaterThan(0);
  });

  it('a run partly answered by a model with no known price: status, history and show give what could be priced as a lower bound and name that model', async () => {
    // Step 1 by Claude Opus 5.5; then the run is worked on with a model the price table does not know.
    expect((await stepwise('run', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'mixed-1', '--step-cap', '1')).out).toContain('capped');
    expect((await stepwise('retry', 'mixed-1', '--step-cap', '10')).code).toBe(0);
    expect((await stepwiseAsking('claude-opus-9', 'run', '--agent', AGENT, '--run-id', 'mixed-1')).out).toContain('completed after 3 steps');

    const status = await stepwise('status', 'mixed-1');
    // The Opus 5.5 step alone was priced: not the run's cost, and said so.
    expect(status.out).toMatch(/cache read \d+; estimated at least \$0\.\d{4} \(no price known for claude-opus-9\)\n/);
    const rows = status.out.split('\n').filter((l) => / write_row /.test(l));
    expect(rows[0]).toMatch(/\$0\.\d{4}$/);
    expect(rows.slice(1).map((r) => r.endsWith('no price'))).toEqual([true, true]);
    expect((await stepwise('history', 'mixed-1')).out).toMatch(/total tokens: .*; estimated at least \$0\.\d{4} \(no price known for claude-opus-9\)/);
    const priced = (JSON.parse((await stepwise('history', 'mixed-1', '--json')).out) as { tool?: string; model?: string; usd?: number }[]).filter((r) => r.tool);
    expect(priced.map((r) => [r.model, typeof r.usd])).toEqual([['claude-opus-5-5', 'number'], ['claude-opus-9', 'undefined'], ['claude-opus-9', 'undefined']]);
    const show = await stepwise('show', 'mixed-1');
    expect(show.out).toMatch(/tokens {3}.*; estimated at least \$0\.\d{4} \(no price known for claude-opus-9\)/);
    expect(show.out).toMatch(/step 3 {2}write_row .* cost no price /);
    const json = JSON.parse((await stepwise('show', 'mixed-1', '--json')).out) as { cost: { usd: number; priced: boolean; unpriced: string[] } };
    expect(json.cost).toMatchObject({ priced: true, unpriced: ['claude-opus-9'] });
    expect(json.cost.usd).toBeGreaterThan(0);
  });
});
