import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fuzzRuns } from './fuzz-runs.ts';

describe('fuzzRuns', () => {
  it('is the property\'s own count by default, times STEPWISE_FUZZ_RUNS, with STEPWISE_FUZZ_SEED and STEPWISE_FUZZ_PATH to replay', () => {
    expect(fuzzRuns(300, {})).toEqual({ numRuns: 300 });
    expect(fuzzRuns(300, { STEPWISE_FUZZ_RUNS: '30' })).toEqual({ numRuns: 9000 });
    expect(fuzzRuns(60, { STEPWISE_FUZZ_SEED: '-1019571493' })).toEqual({ numRuns: 60, seed: -1019571493 });
    expect(fuzzRuns(60, { STEPWISE_FUZZ_SEED: '7', STEPWISE_FUZZ_PATH: '107:2:4' })).toEqual({ numRuns: 60, seed: 7, path: '107:2:4' });
  });

  it('refuses a factor or seed that is not a whole number, a factor below 1, or a path that is not one or has no seed, instead of running the default', () => {
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_RUNS: '3x' })).toThrow('STEPWISE_FUZZ_RUNS must be a whole number, not "3x"');
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_RUNS: '0' })).toThrow('STEPWISE_FUZZ_RUNS must be at least 1, not 0');
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_SEED: '1.5' })).toThrow('STEPWISE_FUZZ_SEED must be a whole number, not "1.5"');
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_SEED: '1', STEPWISE_FUZZ_PATH: '"1:2"' })).toThrow('STEPWISE_FUZZ_PATH must be the path a failure printed');
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_PATH: '1:2' })).toThrow('set STEPWISE_FUZZ_SEED');
  });

  it('replays a failure found past the default count with the seed and path it printed, where the seed alone ran too few runs to reach it', () => {
    // A property that fails at exactly one value: the one run 50 of seed 42 draws.
    const value = fc.nat({ max: 2 ** 30 });
    const bad = fc.sample(value, { seed: 42, numRuns: 50 })[49]!;
    const property = fc.property(value, (v) => v !== bad);
    // The deeper search (the default count times 5) finds it and prints how to replay it.
    const found = fc.check(property, fuzzRuns(10, { STEPWISE_FUZZ_RUNS: '5', STEPWISE_FUZZ_SEED: '42' }));
    expect(found.failed).toBe(true);
    expect(found.counterexample).toEqual([bad]);
    // The seed alone at the default count stops before that run: it passes.
    expect(fc.check(property, fuzzRuns(10, { STEPWISE_FUZZ_SEED: '42' })).failed).toBe(false);
    // Seed and path at the default count: the failing case, at once.
    const replayed = fc.check(property, fuzzRuns(10, { STEPWISE_FUZZ_SEED: String(found.seed), STEPWISE_FUZZ_PATH: found.counterexamplePath! }));
    expect(replayed).toMatchObject({ failed: true, counterexample: [bad], numRuns: 1 });
  });
});
