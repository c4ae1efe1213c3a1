import { afterAll, describe, expect, it } from 'vitest';
import { engineSchedule } from '../../bench/chaos/engine-schedule.ts';
import { scheduleSeed } from '../../bench/chaos/random.ts';
import { add, emptyTotals } from '../../bench/chaos/totals.ts';
import { chaosModelServer, stopChaosModelServer } from '../../bench/chaos/model-server.ts';

const SEED = 11;
const SCHEDULES = 16;

describe('chaos: seeded fault schedules over the engine and the SQLite runtime', () => {
  afterAll(() => stopChaosModelServer());

  it(`${SCHEDULES} schedules (seed ${SEED}): no effect applied twice, no step lost, no run stuck, every ended run for an injected fault`, async () => {
    const totals = emptyTotals();
    const server = await chaosModelServer();
    const before = server.served();
    for (let i = 0; i < SCHEDULES; i++) {
      const report = await engineSchedule(scheduleSeed(SEED, i));
      expect(report.violations, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      expect(report.unexpected, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      add(totals, report);
    }
    const served = server.served() - before;
    // The schedules really injected what they claim to test.
    expect(totals.crashes).toBeGreaterThan(10);
    expect(totals.duplicates).toBeGreaterThan(10);
    expect(totals.brownouts).toBeGreaterThan(0);
    expect(totals.slowWorkers + totals.longEffects).toBeGreaterThan(0);
    expect(totals.clockSteps).toBeGreaterThan(0);
    expect(totals.modelFaults).toBeGreaterThan(0);
    // The model's calls are the requests the Messages API server received.
    expect(totals.modelCalls).toBe(served);
    // Waits answered once, twice, late and never; the second and late answers changed nothing.
    expect(totals.waits).toBeGreaterThan(5);
    for (const key of ['answeredTwice', 'answeredLate', 'neverAnswered', 'timedOut'] as const) expect(totals[key], key).toBeGreaterThan(0);
    // Calls a person approves first: some approved and run (each checked to follow its approval), some not.
    expect(totals.gatedRuns).toBeGreaterThan(0);
    expect(totals.gates).toBeGreaterThan(totals.gatedRuns);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0, waitsTwice: 0 });
    expect(totals.completed + totals.failed + totals.timedOut).toBe(totals.runs);
    expect(totals.completed).toBeGreaterThan(totals.failed);
  });

  it('every kind of model fault comes over HTTP from the Messages API server, and the invariants hold', async () => {
    const totals = emptyTotals();
    const kinds = ['429 burst', '529', '500', 'dropped', 'dropped mid-reply', 'slow', 'invalid reply'];
    for (let i = 0; i < 24 && !kinds.every((kind) => totals.modelFaultsByKind[kind]); i++) {
      const report = await engineSchedule(scheduleSeed(SEED + 1, i), { intensity: 3 });
      expect(report.violations, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      expect(report.unexpected, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      add(totals, report);
    }
    for (const kind of kinds) expect(totals.modelFaultsByKind[kind], kind).toBeGreaterThan(0);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0, waitsTwice: 0 });
  });

  it('tools that never return (one a schedule, before or after their effect): each try ends at its timeoutMs, and the invariants hold', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 8; i++) {
      // Were the try not ended at the tool's timeoutMs, the schedule would wait on it for good.
      const report = await engineSchedule(scheduleSeed(SEED + 2, i), { hangs: 1 });
      expect(report.violations, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      expect(report.unexpected, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      add(totals, report);
    }
    expect(totals.hungTools).toBeGreaterThanOrEqual(4);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0, waitsTwice: 0 });
    expect(totals.completed + totals.failed + totals.timedOut).toBe(totals.runs);
  });

  it('a schedule is a function of its seed: the same seed replays the same faults and outcome', async () => {
    const seed = scheduleSeed(SEED, 3);
    const a = await engineSchedule(seed);
    const b = await engineSchedule(seed);
    expect(b).toEqual(a);
  });

  it('finds a planted defect: a ledger that forgets applies effects twice', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 12 && totals.appliedTwice === 0; i++) add(totals, await engineSchedule(scheduleSeed(SEED, i), { sabotage: 'ledger-forgets' }));
    expect(totals.appliedTwice).toBeGreaterThan(0);
    expect(totals.badSeeds.length).toBeGreaterThan(0);
  });

  it('finds a planted defect: a ledger that times its leases by the wall clock lets a step forward free a live holder\'s key, and its effect runs twice', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 24 && totals.appliedTwice === 0; i++) add(totals, await engineSchedule(scheduleSeed(SEED, i), { sabotage: 'ledger-on-wall-clock' }));
    expect(totals.clockSteps).toBeGreaterThan(0);
    expect(totals.appliedTwice).toBeGreaterThan(0);
  });

  it('finds a planted defect: a sweeper that never sends the timers of long waits leaves runs waiting past their deadline', async () => {
    const totals = emptyTotals();
    const stuck: string[] = [];
    for (let i = 0; i < 12 && totals.stuck === 0; i++) {
      const report = await engineSchedule(scheduleSeed(SEED, i), { sabotage: 'timers-lost', hangs: 0 });
      add(totals, report);
      stuck.push(...report.violations.filter((v) => v.kind === 'stuck').map((v) => v.detail));
    }
    expect(totals.stuck).toBeGreaterThan(0);
    expect(stuck.some((detail) => detail.includes('past its deadline'))).toBe(true);
  });

  it('finds a planted defect: a gated tool whose approval was left off runs its call unasked', async () => {
    const ungated: string[] = [];
    for (let i = 0; i < 12 && !ungated.length; i++) {
      const report = await engineSchedule(scheduleSeed(SEED, i), { sabotage: 'gate-left-off', hangs: 0 });
      ungated.push(...report.violations.filter((v) => v.kind === 'ungated').map((v) => v.detail));
    }
    expect(ungated[0]).toMatch(/gated_row applied under run-\d+\/step-\d+ without an approval at step \d+/);
  });

  it('finds a planted defect: a queue that loses sends leaves runs stuck', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 12 && totals.stuck === 0; i++) add(totals, await engineSchedule(scheduleSeed(SEED, i), { sabotage: 'sends-lost' }));
    expect(totals.stuck).toBeGreaterThan(0);
  });

  it('finds a planted defect on the one-transaction path: a commit that drops the send it carries leaves runs stuck', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 12 && totals.stuck === 0; i++) add(totals, await engineSchedule(scheduleSeed(SEED, i), { sabotage: 'commit-drops-sends' }));
    expect(totals.stuck).toBeGreaterThan(0);
  });
});
