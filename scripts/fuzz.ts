/**
 * `npm run fuzz [-- <file or name>... <vitest flags>]`: the fuzz properties (test/fuzz) at
 * STEPWISE_FUZZ_RUNS times their `npm test` runs (default 30). With files or names (`tool-output`,
 * `test/fuzz/http.test.ts`), only those: vitest takes each path as a filter and runs what matches any,
 * so the script's own `test/fuzz` in front of them ran every file. Other arguments (`-t '<property>'`)
 * go to vitest as they are.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const FUZZ_DIR = 'test/fuzz';
const PATTERN_FLAGS = new Set(['-t', '--testNamePattern']);

/** The fuzz file an argument names, if it names one: a path, or a file's name in test/fuzz without its ending. */
export function fuzzFile(arg: string): string | undefined {
  if (arg.startsWith('-')) return undefined;
  for (const candidate of [arg, join(FUZZ_DIR, arg), join(FUZZ_DIR, `${arg}.test.ts`)]) {
    if (candidate.endsWith('.test.ts') && existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** vitest's arguments for the script's: every file named, else the whole folder, then the rest. */
export function vitestArgs(args: readonly string[]): string[] {
  // A name pattern's value is not a file, though it may be a file's name (`-t engine`).
  const files = args.map((arg, i) => (i > 0 && PATTERN_FLAGS.has(args[i - 1]!) ? undefined : fuzzFile(arg)));
  const named = files.filter((file): file is string => file !== undefined);
  const rest = args.filter((_arg, i) => files[i] === undefined);
  return ['run', ...(named.length ? named : [FUZZ_DIR]), ...rest];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  // vitest's bin, as npm would run it (its package exports no path to it).
  const vitest = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
  const result = spawnSync(process.execPath, [vitest, ...vitestArgs(process.argv.slice(2))], {
    stdio: 'inherit', env: { ...process.env, STEPWISE_FUZZ_RUNS: process.env.STEPWISE_FUZZ_RUNS || '30' },
  });
  process.exit(result.status ?? 1);
}
