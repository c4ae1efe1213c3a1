import { describe, expect, it } from 'vitest';
import { fuzzRuns } from './fuzz-runs.ts';

describe('fuzzRuns', () => {
  it('is the property\'s own count by default, times STEPWISE_FUZZ_RUNS, with STEPWISE_FUZZ_SEED to replay', () => {
    expect(fuzzRuns(300, {})).toEqual({ numRuns: 300 });
    expect(fuzzRuns(300, { STEPWISE_FUZZ_RUNS: '30' })).toEqual({ numRuns: 9000 });
    expect(fuzzRuns(60, { STEPWISE_FUZZ_SEED: '-1019571493' })).toEqual({ numRuns: 60, seed: -1019571493 });
  });

  it('refuses a factor or seed that is not a whole number, or a factor below 1, instead of running the default', () => {
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_RUNS: '3x' })).toThrow('STEPWISE_FUZZ_RUNS must be a whole number, not "3x"');
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_RUNS: '0' })).toThrow('STEPWISE_FUZZ_RUNS must be at least 1, not 0');
    expect(() => fuzzRuns(300, { STEPWISE_FUZZ_SEED: '1.5' })).toThrow('STEPWISE_FUZZ_SEED must be a whole number, not "1.5"');
  });
});
