import { describe, expect, it } from 'vitest';
import { processSchedule } from '../../bench/chaos/process-schedule.ts';
import { scheduleSeed } from '../../bench/chaos/random.ts';

const SEED = 11;

describe('chaos: a seeded schedule of real `stepwise worker --backend aws` processes, SIGKILLed and SIGSTOPped', () => {
  it(`on DynamoDB Local + fauxqs (seed ${SEED}): no effect applied twice, no step lost, no run stuck`, async () => {
    const report = await processSchedule(scheduleSeed(SEED, 3_000_000), { backend: 'aws' });
    expect(report.violations, `seed ${report.seed}`).toEqual([]);
    expect(report.unexpected, `seed ${report.seed}`).toEqual([]);
    expect(report.crashes).toBeGreaterThan(0);
    expect(report.slowWorkers).toBeGreaterThan(0);
    expect(report).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0, completed: report.runs });
  }, 180_000);
});
