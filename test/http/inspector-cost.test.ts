import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Usage } from '../../lib/core/state.ts';
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
