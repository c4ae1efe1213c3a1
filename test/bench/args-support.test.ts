import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { countArgs } from '../../bench/args-support.ts';
import { median } from '../../bench/support.ts';
import { ROOT } from '../support/cli.ts';

const STEPS_AND_ROUNDS = [{ name: 'steps-per-round', fallback: 300 }, { name: 'rounds', fallback: 9 }];

describe("a bench's counts (bench/args-support.ts)", () => {
  it('takes whole numbers in order, each left out its default', () => {
    expect(countArgs([], STEPS_AND_ROUNDS)).toEqual([300, 9]);
    expect(countArgs(['50'], STEPS_AND_ROUNDS)).toEqual([50, 9]);
    expect(countArgs(['50', '2'], STEPS_AND_ROUNDS)).toEqual([50, 2]);
    expect(countArgs(['0'], [{ name: 'output-bytes', fallback: 500, least: 0 }])).toEqual([0]);
  });

  it('refuses what Number() read as NaN or as no rounds, naming the count, where the bench printed NaN for every figure', () => {
    expect(() => countArgs(['--help'], STEPS_AND_ROUNDS)).toThrow('steps-per-round must be a whole number of at least 1, not "--help"');
    expect(() => countArgs(['300', '0'], STEPS_AND_ROUNDS)).toThrow('rounds must be a whole number of at least 1, not "0"');
    for (const bad of ['', '3OO', '2.5', '-1', '1e3', ' 9', '0x10', '99999999999999999999']) {
      expect(() => countArgs(['300', bad], STEPS_AND_ROUNDS)).toThrow(`rounds must be a whole number of at least 1, not ${JSON.stringify(bad)}`);
    }
    expect(() => countArgs(['300', '9', '--fast'], STEPS_AND_ROUNDS)).toThrow('takes 2 counts, not "--fast" after them');
  });

  it('takes a list of counts where its default is one, each item checked as a count', () => {
    const workers = [{ name: 'runs', fallback: 32 }, { name: 'workers', fallback: [1, 4, 16] }];
    expect(countArgs([], workers)).toEqual([32, [1, 4, 16]]);
    expect(countArgs(['8', '2,3'], workers)).toEqual([8, [2, 3]]);
    for (const bad of ['1,,4', '1,x', '', '0,4', '4,']) {
      expect(() => countArgs(['8', bad], workers)).toThrow(`workers must be whole numbers of at least 1 (a comma-separated list), not ${JSON.stringify(bad)}`);
    }
  });

  it('ends throughput.ts given a worker list Number() read as NaN, before it starts any server', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/throughput.ts'), '32', '20', '1,four'], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('throughput.ts: workers must be whole numbers of at least 1 (a comma-separated list), not "1,four"\nusage: node --import tsx bench/throughput.ts [runs] [steps-per-run] [workers] [sqlite-rounds] [aws-rounds] [model-ms] [model-ms-rounds]\n');
  });

  it('ends worker-bundle.ts given an import count that is not one, after its agent module, before it builds anything', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/worker-bundle.ts'), 'examples/aws/agent.ts', 'nine'], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('worker-bundle.ts: import runs must be a whole number of at least 1, not "nine"\nusage: node --import tsx bench/worker-bundle.ts [agent module] [import runs]\n');
  });

  it('ends a bench given 0 rounds with its usage and exit code 2, before measuring anything', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/frame-cost.ts'), '300', '0'], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('frame-cost.ts: rounds must be a whole number of at least 1, not "0"\nusage: node --import tsx bench/frame-cost.ts [transactions-per-round] [rounds]\n');
  });
});

describe('median (bench/support.ts)', () => {
  it('is the middle value, or the mean of the two middle ones, in any order', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
  });

  it('refuses no values, where it gave NaN to be printed as a figure', () => {
    expect(() => median([])).toThrow(RangeError);
  });
});
