import { describe, expect, it } from 'vitest';
import { CHAOS_DEFAULTS, CHAOS_USAGE, chaosOptions, replayCommand, type ChaosOptions } from '../../bench/chaos/options.ts';

const drawn = () => 424242;

describe('npm run chaos: its command line (bench/chaos/options.ts)', () => {
  it('a bare run draws a seed and runs every kind of schedule, real worker processes on both runtimes among them', () => {
    expect(chaosOptions([], drawn)).toEqual({
      seed: 424242, exact: false, verbose: false, schedules: 1000, aws: 1000, processes: 20, awsProcesses: 10,
    });
    expect(CHAOS_DEFAULTS.processes).toBeGreaterThan(0);
    expect(CHAOS_DEFAULTS.awsProcesses).toBeGreaterThan(0);
  });

  it('takes every count and the seed as given, 0 included', () => {
    expect(chaosOptions(['--seed', '20261211', '--schedules', '0', '--aws', '3', '--processes', '0', '--aws-processes', '40', '--verbose'], drawn)).toEqual({
      seed: 20261211, exact: false, verbose: true, schedules: 0, aws: 3, processes: 0, awsProcesses: 40,
    });
  });

  it('refuses a count or seed that is not a whole number, naming the option and the value, where Number() would run something else', () => {
    for (const [option, value] of [['--processes', 'x'], ['--aws-processes', ''], ['--schedules', '1e3'], ['--aws', '-1'], ['--seed', '0x10'], ['--schedules', ' 7'], ['--processes', '2.5']]) {
      expect(() => chaosOptions([`${option!}=${value!}`], drawn)).toThrow(`${option} takes a whole number, not ${JSON.stringify(value)}`);
    }
    expect(() => chaosOptions(['--seed', '4294967296'], drawn)).toThrow('--seed takes a whole number below 2^32');
  });

  it('refuses an unknown option, and lists the ones it takes', () => {
    expect(() => chaosOptions(['--proceses', '5'], drawn)).toThrow(/Unknown option '--proceses'.*--processes n/);
  });

  it('--exact runs only the kind of schedule named, and needs the seed and a kind', () => {
    expect(chaosOptions(['--exact', '--seed', '77', '--aws-processes', '1'], drawn)).toEqual({
      seed: 77, exact: true, verbose: false, schedules: 0, aws: 0, processes: 0, awsProcesses: 1,
    });
    expect(() => chaosOptions(['--exact', '--schedules', '1'], drawn)).toThrow("needs that schedule's --seed");
    expect(() => chaosOptions(['--exact', '--seed', '77'], drawn)).toThrow('--schedules 1, --aws 1, --processes 1 or --aws-processes 1');
  });

  it('the replay command a broken schedule prints reads back as that one schedule, of its kind', () => {
    const kinds = { engine: 'schedules', aws: 'aws', processes: 'processes', 'aws-processes': 'awsProcesses' } as const;
    for (const [kind, key] of Object.entries(kinds)) {
      const args = replayCommand(kind as keyof typeof kinds, 3_000_000_123).split(' -- ')[1]!.split(' ');
      const options = chaosOptions(args, drawn) as ChaosOptions;
      expect(options).toMatchObject({ seed: 3_000_000_123, exact: true });
      expect(options.schedules + options.aws + options.processes + options.awsProcesses).toBe(1);
      expect(options[key]).toBe(1);
    }
  });

  it('--help asks for the usage, which names every option the parser takes', () => {
    expect(chaosOptions(['--help'], drawn)).toBe('help');
    expect(chaosOptions(['-h', '--seed', '3'], drawn)).toBe('help');
    for (const option of ['--seed', '--schedules', '--aws', '--processes', '--aws-processes', '--exact', '--verbose', '--help']) {
      expect(CHAOS_USAGE).toMatch(new RegExp(`^ +(-h, )?${option} `, 'm'));
    }
    expect(CHAOS_USAGE).toContain(`(default ${CHAOS_DEFAULTS.schedules})`);
  });
});
