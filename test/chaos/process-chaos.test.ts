import { describe, expect, it } from 'vitest';
import { processSchedule } from '../../bench/chaos/process-schedule.ts';
import { scheduleSeed } from '../../bench/chaos/random.ts';
import { add, emptyTotals } from '../../bench/chaos/totals.ts';

const SEED = 11;
const SCHEDULES = 2;

describe('chaos: seeded schedules of real worker processes, SIGKILLed and SIGSTOPped', () => {
  it(`${SCHEDULES} schedules (seed ${SEED}): no effect applied twice, no step lost, no run stuck, every run completed or failed for a fault injected`, async () => {
    const totals = emptyTotals();
    for (let i = 0; i < SCHEDULES; i++) {
      const report = await processSchedule(scheduleSeed(SEED, 1_000_000 + i));
      expect(report.violations, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      expect(report.unexpected, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      add(totals, report);
    }
    // The schedules really killed and froze working processes (faults go only to workers that are ready),
    // and the queue delivered again what the killed and frozen ones held.
    expect(totals.crashes).toBeGreaterThan(0);
    expect(totals.slowWorkers).toBeGreaterThan(0);
    expect(totals.duplicates).toBeGreaterThan(0);
    // Some of those workers ran several steps at once (--concurrency 2 or 3, chosen by the seed).
    expect(totals.concurrentWorkers).toBeGreaterThan(0);
    // The machine's wall clock stepped forward under them (past the visibility timeout and the leases).
    expect(totals.clockSteps).toBeGreaterThan(0);
    // Half the keys' effects trust the ledger alone and count every application (the check sees a second one).
    expect(totals.ledgerOnlyEffects).toBeGreaterThan(0);
    expect(totals.modelCalls).toBeGreaterThanOrEqual(totals.completedSteps);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    // The process agent injects only transient faults, but a step can meet three 529s in a row, or be
    // killed more often than its delivery's try limit allows: every run completed, or failed for what was
    // injected (the invariants check each reason).
    expect(totals.completed + totals.failed).toBe(totals.runs);
    expect(totals.completed).toBeGreaterThan(totals.failed);
  }, 120_000);

  it('the machine\'s wall clock steps back under real workers: one finds the times written before the step and counts them again from now, and every run completes with each effect applied once', async () => {
    // This seed steps the clock back about 5 minutes at the loop's third turn, then forward.
    const report = await processSchedule(scheduleSeed(SEED, 1_000_005));
    expect(report.violations).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.clockSteps).toBe(2);
    expect(report.clockStepsSeen).toBeGreaterThan(0);
    expect(report).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    expect(report.completed).toBe(report.runs);
  }, 120_000);

  it('tools that never return: each try ends at the tool\'s timeoutMs, the next takes the key after the lease, and every run completes with each effect applied once', async () => {
    const report = await processSchedule(scheduleSeed(SEED, 1_200_000), { hangRate: 0.3 });
    expect(report.violations).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.hungTools).toBeGreaterThan(0);
    expect(report).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    // A run fails only for what was injected as a failure (three 529s in a row): the invariants flag any
    // other reason, a try that timed out among them.
    expect(report.completed + report.failed).toBe(report.runs);
  }, 180_000);

  it('finds a planted defect: an effect that does not look its key up is applied twice when kills and pauses make it run again', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 8 && totals.appliedTwice === 0; i++) add(totals, await processSchedule(scheduleSeed(SEED, 1_100_000 + i), { sabotage: 'effect-ignores-key' }));
    expect(totals.appliedTwice).toBeGreaterThan(0);
  }, 300_000);
});
