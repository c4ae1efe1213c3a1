import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../../lib/agent.ts';
import type { Usage } from '../../lib/core/state.ts';
import { estimatedUsd } from '../../lib/engine/budget.ts';
import { startRun } from '../../lib/engine/start.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { AnthropicModel } from '../../lib/llm/anthropic.ts';
import { estimateCost, formatUsd } from '../../lib/llm/cost.ts';
import { localSigningKey } from '../../lib/waits/signing-key.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, drain, loadState, tempDb, workerProcess } from '../support/harness.ts';
import { done, startMessagesServer } from '../support/messages-server.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { META, newState, recordFor } from '../support/states.ts';
import { startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const USAGE: Usage = { inputTokens: 100_000, outputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0 };

/** A run stored step by step, each step answered by its model with a call of 100,000 input tokens. */
async function storeRun(runId: string, models: string[]): Promise<void> {
  const store = app.runtime.store;
  let state = newState(runId);
  await store.create(state, META);
  for (const [i, model] of models.entries()) {
    const record = { ...recordFor(runId, i + 1), usage: USAGE, model };
    state = completeStep(state, record, 3_000 + i);
    await store.commit({ runId, expectedVersion: i + 1, state, appended: record, ...META });
  }
}

/**
 * The inspector priced usage of a model with no known price at $0: a run of such a model showed an
 * estimated cost of $0.0000, each step too, and a run of two models the part it could price as the whole.
 */
describe("the inspector's cost of usage with no known price", () => {
  it('says no price is known and for which model, and gives a partly priced run as a lower bound', async () => {
    await storeRun('unpriced-run', ['claude-opus-9', 'claude-opus-9']);
    // Claude Opus 5.5 input is $4 per million: $0.40 for its step.
    await storeRun('mixed-run', ['claude-opus-5-5', 'claude-opus-9']);

    const unpriced = await (await app.api('/inspect/runs/unpriced-run')).text();
    expect(unpriced).toContain('estimated cost no price known for claude-opus-9</p>');
    expect(unpriced).not.toContain('$0.0000');
    expect(unpriced.match(/<td>100000<\/td><td>no price<\/td>/g)).toHaveLength(2);
    expect(unpriced).toContain('<title>step 1: 100000 tokens, no price</title>');

    const mixed = await (await app.api('/inspect/runs/mixed-run')).text();
    expect(mixed).toContain('estimated cost at least $0.4000 (no price known for claude-opus-9)</p>');
    expect(mixed).toContain('<td>100000</td><td>$0.4000</td>');
    expect(mixed).toContain('<td>100000</td><td>no price</td>');

    const list = await (await app.api('/inspect')).text();
    expect(list).toMatch(/unpriced-run<\/a>.*?<td>2<\/td>\n<td>[^<]*<\/td><td>no price known for claude-opus-9<\/td>/s);
    expect(list).toMatch(/mixed-run<\/a>.*?<td>2<\/td>\n<td>[^<]*<\/td><td>at least \$0\.4000 \(no price known for claude-opus-9\)<\/td>/s);
  });
});

/**
 * Usage no step records a model for (a DONE before any step) was priced by the inspector at STEPWISE_MODEL's
 * price, where the API, the inspector's own fork and retry, and the budget price it by the agent's model,
 * the one its workers ask.
 */
describe("the inspector's cost of a run with no step", () => {
  it("prices its usage by the agent's model, as GET /runs/:id/steps/0 and the budget do", async () => {
    const server = await startMessagesServer({ minCacheableTokens: 0 });
    const db = tempDb();
    try {
      server.otherwise(done('Nothing to do: the table is already full.'));
      const agent = defineAgent({ ...rowsAgent(new FakeRows()), settings: { model: 'claude-haiku-4-5' } });
      // The adapter's own default is another model: only the agent's setting says which was asked.
      const model = new AnthropicModel({ apiKey: 'sk-test', baseURL: server.url, env: {}, model: 'claude-opus-5-5' });
      const clock = new ManualClock();
      const worker = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'worker-A' });
      await startRun(worker.deps, { goal: 'fill the table', runId: 'no-steps' });
      await drain(worker.deps, worker.runtime, clock);
      const state = await loadState(worker.runtime, 'no-steps');
      expect(state).toMatchObject({ status: 'completed', step: 0, steps: [] });
      expect(server.requests.map((r) => r.body?.model)).toEqual(['claude-haiku-4-5']);
      const haiku = estimateCost(state.usage, 'claude-haiku-4-5')!.usd;
      expect(estimatedUsd(state, 'claude-haiku-4-5')).toBeCloseTo(haiku, 12);

      const http = createHttpApp({
        store: worker.runtime.store, blobs: worker.runtime.blobs, queue: worker.runtime.queue, clock, workerId: 'api', codeVersion: 'test',
        log: worker.deps.log, agent, signingKey: localSigningKey(join(db.path, '..', 'signing.key')),
      });
      const api = await (await http.request('/runs/no-steps/steps/0')).json() as { cost: { usd: number } };
      expect(api.cost.usd).toBeCloseTo(haiku, 12);
      const page = await (await http.request('/inspect/runs/no-steps')).text();
      expect(page).toContain(`estimated cost ${formatUsd(haiku)}</p>`);
      expect(formatUsd(haiku)).not.toBe(formatUsd(estimateCost(state.usage, 'claude-opus-5-5')!.usd));
      const list = await (await http.request('/inspect')).text();
      expect(list).toMatch(new RegExp(`no-steps</a>.*?<td>${formatUsd(haiku).replace('$', '\\$')}</td>`, 's'));
      worker.runtime.close();
    } finally {
      await server.stop();
      db.cleanup();
    }
  });
});
