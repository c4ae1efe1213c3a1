import { describe, expect, it } from 'vitest';
import type { HeldSteps } from '../../lib/core/codec.ts';
import type { StepRecord } from '../../lib/core/state.ts';
import { StepCache } from '../../lib/engine/step-cache.ts';

/** A run's held records: `records` steps, each with an output of `chars` characters. */
const held = (records: number, chars: number): HeldSteps => ({
  from: 0, condensed: [],
  steps: Array.from({ length: records }, (_, i) => ({ step: i + 1, result: { ok: true, bytes: chars, text: 'x'.repeat(chars) } }) as unknown as StepRecord),
});

describe('the step cache', () => {
  it('drops the least recently used runs once their outputs pass its size, not only past 256 runs; the run just set stays', () => {
    const cache = new StepCache(100_000);
    for (let i = 0; i < 10; i++) cache.set(`r${i}`, held(10, 1_000));
    expect(cache.heldChars()).toBe(100_000);
    // r0 was used last of the first ones: it stays, r1 (now the least recent) goes.
    expect(cache.get('r0')).toBeDefined();
    cache.set('r10', held(10, 1_000));
    expect(cache.get('r1')).toBeUndefined();
    expect(cache.get('r0')).toBeDefined();
    expect(cache.heldChars()).toBe(100_000);
    // A run's records set again replace its earlier weight, not add to it.
    cache.set('r10', held(20, 1_000));
    expect(cache.heldChars()).toBeLessThanOrEqual(100_000);
    expect(cache.get('r10')?.steps).toHaveLength(20);
    // One run bigger than the whole size is kept alone: its next step needs it.
    cache.set('huge', held(5, 50_000));
    expect(cache.get('huge')).toBeDefined();
    expect(cache.heldChars()).toBe(250_000);
    expect(cache.get('r0')).toBeUndefined();
    cache.delete('huge');
    expect(cache.heldChars()).toBe(0);
  });

  it('still holds at most 256 runs, however small', () => {
    const cache = new StepCache();
    for (let i = 0; i < 300; i++) cache.set(`r${i}`, held(1, 10));
    expect(cache.get('r43')).toBeUndefined();
    expect(cache.get('r44')).toBeDefined();
    expect(cache.heldChars()).toBe(2_560);
  });
});
