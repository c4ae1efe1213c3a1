import { describe, expect, it } from 'vitest';
import type { Usage } from '../../lib/core/state.ts';
import { costText, estimateCost, estimateRunUsd, runCost } from '../../lib/llm/cost.ts';

const step: Usage = { inputTokens: 1_000, outputTokens: 100, cacheWriteTokens: 0, cacheReadTokens: 0 };
const done: Usage = { inputTokens: 2_000, outputTokens: 300, cacheWriteTokens: 0, cacheReadTokens: 0 };
const both: Usage = { inputTokens: 3_000, outputTokens: 400, cacheWriteTokens: 0, cacheReadTokens: 0 };
const SONNET = 'claude-sonnet-4-5';
const DEFAULT = 'claude-opus-5-5';

describe('runCost', () => {
  it('prices the usage no step carries (the DONE reply) by the model that answered last, as the budget does', () => {
    // `status` and `history` pass the default model as the fallback; `show --json` and the budget price
    // the DONE reply by the last step's model. Both must give the same figure for the same run.
    const run = { usage: both, steps: [{ usage: step, model: SONNET }] };
    const sonnet = estimateCost(step, SONNET)!.usd + estimateCost(done, SONNET)!.usd;
    expect(runCost(run, DEFAULT).usd).toBeCloseTo(sonnet, 12);
    expect(runCost(run, DEFAULT).usd).toBeCloseTo(estimateRunUsd(run, SONNET)!, 12);
  });

  it('a waiting run: the call that began the wait is priced by its model, which no step records yet', () => {
    const run = { usage: done, steps: [], wait: { model: 'claude-haiku-4-5' } };
    expect(runCost(run, DEFAULT).usd).toBeCloseTo(estimateCost(done, 'claude-haiku-4-5')!.usd, 12);
  });

  it('with no model recorded anywhere, the fallback prices it', () => {
    expect(runCost({ usage: done, steps: [] }, DEFAULT).usd).toBeCloseTo(estimateCost(done, DEFAULT)!.usd, 12);
  });

  it('names the models it could not price, and says the figure is then a lower bound, never $0 for unpriced usage', () => {
    const unknown = runCost({ usage: both, steps: [{ usage: step, model: 'claude-opus-9' }] }, DEFAULT);
    expect(unknown).toMatchObject({ usd: 0, priced: false, unpriced: ['claude-opus-9'] });
    expect(costText(unknown)).toBe('no price known for claude-opus-9');
    const mixed = runCost({ usage: both, steps: [{ usage: step, model: SONNET }, { usage: done, model: 'claude-opus-9' }] }, DEFAULT);
    expect(mixed).toMatchObject({ priced: true, unpriced: ['claude-opus-9'] });
    expect(costText(mixed)).toBe(`at least $${estimateCost(step, SONNET)!.usd.toFixed(4)} (no price known for claude-opus-9)`);
    // No usage at all (an offline model): nothing left unpriced, and nothing spent.
    expect(costText(runCost({ usage: { ...both, inputTokens: 0, outputTokens: 0 }, steps: [] }, DEFAULT))).toBe('$0.0000');
  });
});
