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
    // Some workers ran several steps at once (--concurrency 2 or 3, chosen by the seed), on SQS too.
    expect(report.concurrentWorkers).toBeGreaterThan(0);
    expect(report.ledgerOnlyEffects).toBeGreaterThan(0);
    expect(report).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    // Every run completed, or failed for what was injected (the invariants check each reason): a step can
    // meet three 529s in a row, or be killed more often than its delivery's try limit allows.
    expect(report.completed + report.failed).toBe(report.runs);
    expect(report.completed).toBeGreaterThan(report.failed);
  }, 180_000);
  it('one worker\'s machine clock steps back 51 minutes, its neighbours\' left where they were: its claims look run out to them, they watch and find it renewing; every run completes with each effect applied once', async () => {
    // This seed steps one ready worker's clock back about 51 minutes at the loop's fifth turn (or the first after with a worker ready).
    const report = await processSchedule(scheduleSeed(SEED, 3_000_011), { backend: 'aws' });
    expect(report.violations, `seed ${report.seed}`).toEqual([]);
    expect(report.unexpected, `seed ${report.seed}`).toEqual([]);
    expect(report.clockSteps).toBe(1);
    expect(report).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    expect(report.completed).toBe(report.runs);
  }, 180_000);
});
