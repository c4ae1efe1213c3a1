/**
 * `npm run chaos`'s command line, read and checked before anything starts: a typo must not run 25 minutes
 * of schedules other than the ones asked for, nor skip a kind of schedule without a word.
 */
import { parseArgs } from 'node:util';

export interface ChaosOptions {
  seed: number;
  /** Whether `seed` is one schedule's own seed (a replay), not the base every schedule's is drawn from. */
  exact: boolean;
  schedules: number;
  aws: number;
  /** Schedules of real `stepwise worker` processes on one SQLite file. */
  processes: number;
  /** The same with `stepwise worker --backend aws`. */
  awsProcesses: number;
  verbose: boolean;
}

/**
 * The schedules a bare `npm run chaos` runs. Real worker processes are in the default, a few dozen of
 * them (10-12 s each), so that the command alone kills and pauses real processes on both runtimes, as the
 * in-process schedules cannot: a SIGKILL's lost file locks and a SIGSTOP's frozen timers.
 */
export const CHAOS_DEFAULTS = { schedules: 1000, aws: 1000, processes: 20, awsProcesses: 10 } as const;

export const CHAOS_USAGE = `usage: npm run chaos [-- options]

Seeded fault schedules over both runtimes, then the invariants after each: every idempotency key
applied at most once, no step lost or repeated, no run stuck. Prints the seed; the same seed replays
the same schedules.

  --seed n            the base seed (default: drawn, and printed)
  --schedules n       engine schedules on SQLite, in process (default ${CHAOS_DEFAULTS.schedules})
  --aws n             AWS-path schedules on DynamoDB Local + fauxqs (default ${CHAOS_DEFAULTS.aws})
  --processes n       schedules of real stepwise worker processes on SQLite, SIGKILLed and
                      SIGSTOPped (default ${CHAOS_DEFAULTS.processes})
  --aws-processes n   the same with stepwise worker --backend aws (default ${CHAOS_DEFAULTS.awsProcesses})
  --exact             --seed is one schedule's own seed (a replay of the kind named, count 1)
  --verbose           a line per schedule
  -h, --help          this text
`;

const COUNTS = { schedules: 'schedules', aws: 'aws', processes: 'processes', awsProcesses: 'aws-processes' } as const;

/** Reads the arguments; throws an Error naming the option and the value for anything it cannot take. */
export function chaosOptions(args: readonly string[], drawSeed = () => Math.floor(Math.random() * 2 ** 31)): ChaosOptions | 'help' {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: {
        help: { type: 'boolean', short: 'h' },
        seed: { type: 'string' }, exact: { type: 'boolean', default: false }, verbose: { type: 'boolean', default: false },
        schedules: { type: 'string' }, aws: { type: 'string' }, processes: { type: 'string' }, 'aws-processes': { type: 'string' },
      },
    }));
  } catch (error) {
    throw new Error(`${(error as Error).message}; options: --seed n, --exact, --schedules n, --aws n, --processes n, --aws-processes n, --verbose, --help`);
  }
  if (values.help === true) return 'help';
  const exact = values.exact === true;
  // A replay runs the kind of schedule named, and only that: one seed over 1,000 AWS schedules is 1,000 copies.
  const count = (key: keyof typeof COUNTS): number => {
    const text = values[COUNTS[key]];
    if (text === undefined) return exact ? 0 : CHAOS_DEFAULTS[key];
    return wholeNumber(`--${COUNTS[key]}`, text as string);
  };
  const seed = values.seed === undefined ? drawSeed() : wholeNumber('--seed', values.seed as string);
  if (seed > 0xffff_ffff) throw new Error(`--seed takes a whole number below 2^32, not ${String(values.seed)}`);
  const options = {
    seed, exact, verbose: values.verbose === true,
    schedules: count('schedules'), aws: count('aws'), processes: count('processes'), awsProcesses: count('awsProcesses'),
  };
  if (exact && values.seed === undefined) throw new Error('--exact replays one schedule: it needs that schedule\'s --seed');
  if (exact && options.schedules + options.aws + options.processes + options.awsProcesses === 0) {
    throw new Error('--exact replays the schedule of the kind named: --schedules 1, --aws 1, --processes 1 or --aws-processes 1');
  }
  return options;
}

/** The command that replays one schedule of a run: its own seed, and its kind. */
export function replayCommand(kind: 'engine' | 'aws' | 'processes' | 'aws-processes', seed: number): string {
  const option = kind === 'engine' ? 'schedules' : kind;
  return `npm run chaos -- --exact --seed ${seed} --${option} 1`;
}

/** Digits only: Number() would also take '', ' 7', '1e3' and '0x10', and NaN would run nothing. */
function wholeNumber(option: string, text: string): number {
  if (!/^\d{1,10}$/.test(text)) throw new Error(`${option} takes a whole number, not ${JSON.stringify(text)}`);
  return Number(text);
}
