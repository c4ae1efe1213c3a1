/**
 * The counts a bench takes on its command line (`node --import tsx bench/step-overhead.ts [steps-per-round]
 * [rounds]`). Read with Number(), "--help", "3OO" or "" was NaN and 0 rounds was none: the bench ran on and
 * printed NaN for every figure, as if measured.
 */
import { basename } from 'node:path';

/**
 * One count: its name in the usage line, the value when it is left out, and the least it may be. A list
 * of counts (`1,4,16`) when its fallback is one.
 */
export interface CountSpec { name: string; fallback: number | readonly number[]; least?: number }

/**
 * `args` (the command line after the script) read as `specs` in their order: each a whole number of at
 * least its `least` (1 by default), its `fallback` when left out. Throws a RangeError naming the count and
 * what was given, or the argument past the last count.
 */
export function countArgs(args: readonly string[], specs: readonly CountSpec[]): (number | number[])[] {
  if (args.length > specs.length) throw new RangeError(`takes ${specs.length} count${specs.length === 1 ? '' : 's'}, not ${JSON.stringify(args[specs.length])} after them`);
  return specs.map(({ name, fallback, least = 1 }, i) => {
    const given = args[i];
    if (given === undefined) return typeof fallback === 'number' ? fallback : [...fallback];
    if (typeof fallback === 'number') return count(name, given, least, given);
    const items = given.split(',');
    return items.map((item) => count(name, item, least, given, ' (a comma-separated list)'));
  });
}

function count(name: string, item: string, least: number, given: string, list = ''): number {
  const n = /^\d+$/.test(item) ? Number(item) : NaN;
  if (!Number.isSafeInteger(n) || n < least) throw new RangeError(`${name} must be ${list ? 'whole numbers' : 'a whole number'} of at least ${least}${list}, not ${JSON.stringify(given)}`);
  return n;
}

/**
 * This process's counts (countArgs over process.argv); a bad one ends it with the usage line and exit code 2.
 * `leading`: arguments before the counts that are not counts (worker-bundle.ts's agent module), named in the
 * usage line and skipped.
 */
export function benchCounts(specs: readonly CountSpec[], leading: readonly string[] = []): (number | number[])[] {
  try {
    return countArgs(process.argv.slice(2 + leading.length), specs);
  } catch (error) {
    const script = basename(process.argv[1] ?? 'bench');
    process.stderr.write(`${script}: ${(error as Error).message}\nusage: node --import tsx bench/${script} ${[...leading, ...specs.map((s) => s.name)].map((name) => `[${name}]`).join(' ')}\n`);
    process.exit(2);
  }
}
