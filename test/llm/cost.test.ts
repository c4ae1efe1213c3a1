import { describe, expect, it } from 'vitest';
import type { Usage } from '../../lib/core/state.ts';
import { MODEL_PRICES, estimateCost, estimateUncachedCost, formatUsd, priceOf } from '../../lib/llm/cost.ts';

const usage: Usage = { inputTokens: 2_000, outputTokens: 500, cacheWriteTokens: 1_000, cacheReadTokens: 100_000 };

describe('cost', () => {
  it('prices a known usage on Claude Opus 5.5 ($4 in, $20 out, $5 5m write, $0.20 read per MTok)', () => {
    const cost = estimateCost(usage, 'claude-opus-5-5')!;
    expect(cost.inputUsd).toBeCloseTo(0.008, 10);
    expect(cost.outputUsd).toBeCloseTo(0.01, 10);
    expect(cost.cacheWriteUsd).toBeCloseTo(0.005, 10);
    expect(cost.cacheReadUsd).toBeCloseTo(0.02, 10);
    expect(cost.usd).toBeCloseTo(0.043, 10);
    // Without caching, all 103,000 prompt tokens bill at $4/MTok.
    expect(estimateUncachedCost(usage, 'claude-opus-5-5')).toBeCloseTo(0.412 + 0.01, 10);
  });

  it('applies the standard multipliers: 5-minute write 1.25x input, read 0.1x input (Claude Opus 4.8, $5 / $25)', () => {
    expect(priceOf('claude-opus-4-8')).toEqual({ input: 5, output: 25, cacheWrite: 6.25, cacheRead: 0.5 });
    const cost = estimateCost({ inputTokens: 0, outputTokens: 0, cacheWriteTokens: 1_000_000, cacheReadTokens: 1_000_000 }, 'claude-opus-4-8')!;
    expect(cost.usd).toBeCloseTo(6.75, 10);
  });

  it('bills a long Haiku 5.5 prompt at its long-prompt band, every token of that request', () => {
    const short: Usage = { inputTokens: 90_000, outputTokens: 1_000, cacheWriteTokens: 0, cacheReadTokens: 0 };
    const long: Usage = { inputTokens: 90_000, outputTokens: 1_000, cacheWriteTokens: 0, cacheReadTokens: 20_000 };
    expect(estimateCost(short, 'claude-haiku-5-5')!.usd).toBeCloseTo(0.009 + 0.0005, 10);
    expect(estimateCost(long, 'claude-haiku-5-5')!.usd).toBeCloseTo(0.045 + 0.0025 + 0.001, 10);
  });

  it('finds snapshot ids and refuses to guess unknown models', () => {
    expect(priceOf('claude-haiku-4-5-20251001')).toBe(MODEL_PRICES['claude-haiku-4-5']);
    expect(priceOf('claude-sonnet-4-5-20250929')).toBe(MODEL_PRICES['claude-sonnet-4-5']);
    expect(priceOf('claude-opus-5-5')).not.toBe(priceOf('claude-opus-5'));
    expect(priceOf('claude-opus-4-0')).toBe(MODEL_PRICES['claude-opus-4']);
    expect(priceOf('claude-sonnet-4-0')).toBe(MODEL_PRICES['claude-sonnet-4']);
    // A version the table does not list is not priced as its family's first: Opus 4 is $15, Opus 4.5 to 4.8 $5.
    expect(priceOf('claude-opus-4-9')).toBeUndefined();
    expect(priceOf('claude-opus-5-6')).toBeUndefined();
    expect(priceOf('claude-sonnet-4-7-20270101')).toBeUndefined();
    expect(priceOf('claude-opus-4-5-preview')).toBeUndefined();
    expect(estimateCost(usage, 'gpt-9')).toBeUndefined();
    expect(estimateUncachedCost(usage, 'claude-unknown')).toBeUndefined();
  });

  it('every listed model has positive prices, a cache write above input and a cache read below it', () => {
    for (const [id, price] of Object.entries(MODEL_PRICES)) {
      expect(price.input, id).toBeGreaterThan(0);
      expect(price.output, id).toBeGreaterThan(price.input);
      expect(price.cacheWrite, id).toBeCloseTo(price.input * 1.25, 10);
      expect(price.cacheRead, id).toBeLessThanOrEqual(price.input * 0.1 + 1e-12);
    }
  });

  it('every rate is a whole number of thousandths of a dollar per MTok, so a token costs whole nanodollars (wholeNanos)', () => {
    for (const [model, price] of Object.entries(MODEL_PRICES)) {
      for (const rates of [price, price.longPrompt?.rates]) {
        for (const rate of rates ? [rates.input, rates.output, rates.cacheWrite, rates.cacheRead] : []) {
          expect(Math.abs(rate * 1000 - Math.round(rate * 1000)), `${model} ${rate}`).toBeLessThan(1e-6);
        }
      }
    }
  });

  it('formats dollars', () => {
    expect(formatUsd(0.04300001)).toBe('$0.0430');
    expect(formatUsd(12.345)).toBe('$12.35');
  });
});
