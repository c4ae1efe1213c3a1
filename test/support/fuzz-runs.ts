/**
 * A fuzz property's fast-check parameters: its `numRuns` as `npm test` runs it, times STEPWISE_FUZZ_RUNS
 * (a whole number, default 1) for a deeper search, and STEPWISE_FUZZ_SEED with STEPWISE_FUZZ_PATH to replay
 * the `{ seed, path }` a failure printed. `npm test` keeps the default: its time is bounded; the deeper search
 * is a command of its own:
 *
 *   npm run fuzz                                  (30 times, the default of the command)
 *   STEPWISE_FUZZ_RUNS=100 npm run fuzz -- --testTimeout 0
 *
 * The seed alone replays the search from its first run, so it finds a failure only within as many runs as
 * found it (the same STEPWISE_FUZZ_RUNS); the path goes straight to the failing run and its shrunk case,
 * whatever the count. Every property of the run gets them: name the one that failed.
 *
 *   STEPWISE_FUZZ_SEED=s STEPWISE_FUZZ_PATH=p npx vitest run test/fuzz/<file> -t '<property>'
 */
export function fuzzRuns(numRuns: number, env: NodeJS.ProcessEnv = process.env): { numRuns: number; seed?: number; path?: string } {
  const factor = wholeNumber('STEPWISE_FUZZ_RUNS', env.STEPWISE_FUZZ_RUNS) ?? 1;
  if (factor < 1) throw new RangeError(`STEPWISE_FUZZ_RUNS must be at least 1, not ${factor}`);
  const seed = wholeNumber('STEPWISE_FUZZ_SEED', env.STEPWISE_FUZZ_SEED);
  const path = env.STEPWISE_FUZZ_PATH || undefined;
  if (path !== undefined) {
    // fast-check's path is run:shrink:shrink...; another text would be refused by fast-check mid-run, or replay nothing.
    if (!/^\d+(:\d+)*$/.test(path)) throw new RangeError(`STEPWISE_FUZZ_PATH must be the path a failure printed (such as "12:0:3"), not ${JSON.stringify(path)}`);
    if (seed === undefined) throw new RangeError('STEPWISE_FUZZ_PATH replays a path of one seed: set STEPWISE_FUZZ_SEED to the seed printed with it');
  }
  return { numRuns: numRuns * factor, ...(seed === undefined ? {} : { seed }), ...(path === undefined ? {} : { path }) };
}

function wholeNumber(name: string, value: string | undefined): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  // A typo must not quietly run the default search and pass.
  if (!Number.isSafeInteger(n)) throw new RangeError(`${name} must be a whole number, not ${JSON.stringify(value)}`);
  return n;
}
