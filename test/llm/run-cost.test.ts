import { describe, expect, it } from 'vitest';
import type { StepRecord, Usage } from '../../lib/core/state.ts';
import { condensedBlock } from '../../lib/core/condensed.ts';
import { blockCost, costText, estimateCost, estimateRunUsd, lastModelOf, runCost } from '../../lib/llm/cost.ts';

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

describe('a state from a bounded load (condensed blocks it does not hold)', () => {
  /** 300 steps of two models, one with no known price at steps 150-160, and a DONE reply after them. */
  function longRun() {
    const steps = Array.from({ length: 300 }, (_, i) => ({
      step: i + 1, tool: 'copy', input: {}, at: i, workerId: 'w', result: { ok: true, text: 'ok', bytes: 2 },
      usage: { ...step, cacheReadTokens: i * 10 }, model: i >= 150 && i < 160 ? 'claude-opus-9' : i % 2 ? SONNET : DEFAULT,
    }));
    const usage = [...steps.map((s) => s.usage), done].reduce((sum, u) => ({
      inputTokens: sum.inputTokens + u.inputTokens, outputTokens: sum.outputTokens + u.outputTokens,
      cacheWriteTokens: sum.cacheWriteTokens + u.cacheWriteTokens, cacheReadTokens: sum.cacheReadTokens + u.cacheReadTokens,
    }));
    return { usage, steps };
  }

  it('prices the blocks it does not hold from their summaries\' cost, as every record prices them', () => {
    const full = longRun();
    const condensed = [condensedBlock(full.steps.slice(0, 100), blockCost), condensedBlock(full.steps.slice(100, 200), blockCost)];
    const bounded = { ...full, steps: full.steps.slice(200), stepsFrom: 200, condensed };
    const whole = runCost(full, DEFAULT);
    expect(runCost(bounded, DEFAULT)).toEqual({ ...whole, usd: expect.closeTo(whole.usd, 12), uncachedUsd: expect.closeTo(whole.uncachedUsd, 12) });
    expect(whole).toMatchObject({ unpriced: ['claude-opus-9'], approximate: false });
    // The budget refuses to price what it cannot, from a summary as from a record.
    expect(estimateRunUsd(bounded, DEFAULT)).toBeUndefined();
    const known = longRun();
    for (const s of known.steps) if (s.model === 'claude-opus-9') s.model = SONNET;
    const knownBounded = { ...known, steps: known.steps.slice(200), stepsFrom: 200, condensed: [condensedBlock(known.steps.slice(0, 100), blockCost), condensedBlock(known.steps.slice(100, 200), blockCost)] };
    expect(estimateRunUsd(knownBounded, lastModelOf(knownBounded))).toBeCloseTo(estimateRunUsd(known, lastModelOf(known))!, 12);
    // Holding no record after its blocks, the state's last model is its last block's.
    expect(lastModelOf({ ...knownBounded, steps: [], stepsFrom: 200 })).toBe(SONNET);
  });

  it('says nothing could be priced for a long run of an offline model (no usage), from its summaries as from every record', () => {
    const steps: StepRecord[] = Array.from({ length: 250 }, (_, i) => ({ step: i + 1, tool: 'copy', input: {}, at: i, workerId: 'w', result: { ok: true, text: 'ok', bytes: 2 } }));
    const run = { usage: { inputTokens: 0, outputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0 }, steps };
    const bounded = { ...run, steps: steps.slice(100), stepsFrom: 100, condensed: [condensedBlock(steps.slice(0, 100), blockCost)] };
    expect(runCost(run, DEFAULT)).toMatchObject({ priced: false, usd: 0 });
    expect(runCost(bounded, DEFAULT)).toEqual(runCost(run, DEFAULT));
  });

  it('a block summarised without its cost (older code) is priced by the last model and marked approximate; a record with usage and no model gives no cost', () => {
    const full = longRun();
    const { cost: _cost, ...older } = condensedBlock(full.steps.slice(0, 100), blockCost);
    const bounded = { ...full, steps: full.steps.slice(100), stepsFrom: 100, condensed: [older] };
    expect(runCost(bounded, DEFAULT).approximate).toBe(true);
    expect(blockCost([{ usage: step, model: SONNET }, { usage: step }])).toBeUndefined();
    expect(blockCost([{ usage: step, model: SONNET }, {}])).toMatchObject({ model: SONNET });
  });
});
