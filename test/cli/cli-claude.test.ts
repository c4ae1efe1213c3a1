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
  return stepwiseCli(args, {
    STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), STEPWISE_LOG_LEVEL: 'warn',
    ANTHROPIC_API_KEY: 'sk-test-local', ANTHROPIC_BASE_URL: server.url, STEPWISE_MODEL: 'claude-opus-5-5',
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

    const json = JSON.parse((await stepwise('status', 'claude-1', '--json')).out) as { usage: Record<string, number>; steps: { usage: Record<string, number>; model: string }[]; cost: { usd: number; priced: boolean } };
    // The totals are the sum of what the server reported for every request of the run.
    const reported = server.requests.map((q) => q.usage!).filter(Boolean);
    expect(json.usage.inputTokens).toBe(reported.reduce((n, u) => n + u.input_tokens, 0));
    expect(json.usage.cacheReadTokens).toBe(reported.reduce((n, u) => n + u.cache_read_input_tokens, 0));
    expect(json.steps.map((s) => s.model)).toEqual(['claude-opus-5-5', 'claude-opus-5-5', 'claude-opus-5-5']);
    expect(json.cost.priced).toBe(true);
    expect(json.cost.usd).toBeGreaterThan(0);
  });
});
