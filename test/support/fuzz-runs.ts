/**
 * A fuzz property's fast-check parameters: its `numRuns` as `npm test` runs it, times STEPWISE_FUZZ_RUNS
 * (a whole number, default 1) for a deeper search, and STEPWISE_FUZZ_SEED to replay the seed a failure
 * printed. `npm test` keeps the default: its time is bounded; the deeper search is a command of its own:
 *
 *   npm run fuzz                                  (30 times, the default of the command)
 *   STEPWISE_FUZZ_RUNS=100 npm run fuzz -- --testTimeout 0
 */
export function fuzzRuns(numRuns: number, env: NodeJS.ProcessEnv = process.env): { numRuns: number; seed?: number } {
  const factor = wholeNumber('STEPWISE_FUZZ_RUNS', env.STEPWISE_FUZZ_RUNS) ?? 1;
  if (factor < 1) throw new RangeError(`STEPWISE_FUZZ_RUNS must be at least 1, not ${factor}`);
  const seed = wholeNumber('STEPWISE_FUZZ_SEED', env.STEPWISE_FUZZ_SEED);
  return { numRuns: numRuns * factor, ...(seed === undefined ? {} : { seed }) };
}

function wholeNumber(name: string, value: string | undefined): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  // A typo must not quietly run the default search and pass.
  if (!Number.isSafeInteger(n)) throw new RangeError(`${name} must be a whole number, not ${JSON.stringify(value)}`);
  return n;
}
