import { DeleteCommand, GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { awsSchedule } from '../../bench/chaos/aws-schedule.ts';
import { checkInvariants, type RunExpectation } from '../../bench/chaos/invariants.ts';
import { chaosModelServer, stopChaosModelServer } from '../../bench/chaos/model-server.ts';
import { scheduleSeed } from '../../bench/chaos/random.ts';
import { add, emptyTotals } from '../../bench/chaos/totals.ts';
import { LEDGER_SK, PK, SK, checkpointSk, ledgerPk, runPk } from '../../lib/aws/table-layout.ts';
import type { Model } from '../../lib/ports.ts';
import { createTestResources, startTestRun, type TestResources } from '../aws/aws-fixtures.ts';
import { WorkerProcess, driveRun } from '../aws/lambda-harness.ts';
import { useAwsServers } from '../support/aws-servers.ts';

const SEED = 15;
const SCHEDULES = 8;

// The global setup starts the servers for a run that includes this file; on its own (`vitest run
// test/chaos`) the file starts them itself.
let stopServers: (() => Promise<void>) | undefined;
beforeAll(async () => { stopServers = await useAwsServers(); });
afterAll(async () => { await stopChaosModelServer(); await stopServers?.(); });

describe('chaos: seeded fault schedules over the AWS runtime (Lambda handler, DynamoDB Local, fauxqs)', () => {
  it(`${SCHEDULES} schedules (seed ${SEED}): no effect applied twice, no step lost, no run stuck, every ended run for an injected fault`, async () => {
    const totals = emptyTotals();
    const server = await chaosModelServer();
    const before = server.served();
    for (let i = 0; i < SCHEDULES; i++) {
      const report = await awsSchedule(scheduleSeed(SEED, i));
      expect(report.violations, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      expect(report.unexpected, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      add(totals, report);
    }
    const served = server.served() - before;
    // The schedules really injected what they claim to test.
    expect(totals.crashes).toBeGreaterThan(5);
    expect(Object.keys(totals.crashesByPoint).filter((p) => /^C\d$/.test(p)).length).toBeGreaterThanOrEqual(6);
    expect(totals.duplicates).toBeGreaterThan(5);
    expect(totals.ambiguousWrites).toBeGreaterThan(0);
    expect(totals.slowWorkers).toBeGreaterThan(0);
    expect(totals.brownouts).toBeGreaterThan(0);
    expect(totals.modelFaults).toBeGreaterThan(0);
    expect(totals.clockSteps).toBeGreaterThan(0);
    // The model is the real adapter over HTTP: its calls are the requests the Messages API server received,
    // and its faults were the server's replies, of more than one kind.
    expect(totals.modelCalls).toBe(served);
    expect(Object.keys(totals.modelFaultsByKind).length, JSON.stringify(totals.modelFaultsByKind)).toBeGreaterThanOrEqual(2);
    // A lost message's run moved again only because the sweeper re-drove it.
    expect(totals.lostMessages).toBeGreaterThan(0);
    expect(totals.redriven).toBeGreaterThan(0);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    expect(totals.completed + totals.failed).toBe(totals.runs);
    expect(totals.completed).toBeGreaterThan(totals.failed);
  });

  it('clocks that disagree: containers whose clock runs hours ahead or behind apply nothing twice and leave no run stuck', async () => {
    // Seed 15's schedules 9 and 50 step a container's clock two hours ahead: before the stall sweep looked
    // for checkpoints stamped ahead of its clock, schedule 9 left a run stuck (its message lost, its
    // checkpoint stamped by the clock ahead); before the ledger watched a claim on its own time before taking
    // it over, schedule 50 applied a ledger-only effect twice (a container ahead took a live holder's key).
    // Seed 3754157173 (seed 20261246's schedule 666) stepped a container's clock ten minutes ahead, less than
    // the stall window, which the sweeper then waited out on top of the window: past the schedule's patience.
    // Seed 2284402602 (its schedule 889) throttled all of a holder's renewals while it waited after a
    // ledger-only effect, a holder cut off from the table like a frozen one: the schedule no longer does.
    const totals = emptyTotals();
    for (const seed of [scheduleSeed(SEED, 9), scheduleSeed(SEED, 50), 3754157173, 2284402602]) {
      const report = await awsSchedule(seed);
      expect(report.violations, `seed ${seed}`).toEqual([]);
      expect(report.unexpected, `seed ${seed}`).toEqual([]);
      add(totals, report);
    }
    expect(totals.clockSteps).toBeGreaterThanOrEqual(3);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
  });

  it('tools that never return (one a schedule): each try ends at its timeoutMs, and the invariants hold', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 6; i++) {
      // Were the try not ended at the tool's timeoutMs, the handler would wait on it for good.
      const report = await awsSchedule(scheduleSeed(SEED + 1, i), { hangs: 1 });
      expect(report.violations, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      expect(report.unexpected, `schedule ${i}, seed ${report.seed}`).toEqual([]);
      add(totals, report);
    }
    expect(totals.hungTools).toBeGreaterThanOrEqual(3);
    expect(totals).toMatchObject({ appliedTwice: 0, stepsLost: 0, stuck: 0 });
    expect(totals.completed + totals.failed).toBe(totals.runs);
  });

  it('a schedule is a function of its seed: the same seed replays the same faults and outcome', async () => {
    const seed = scheduleSeed(SEED, 2);
    const a = await awsSchedule(seed);
    const b = await awsSchedule(seed);
    expect(b).toEqual(a);
  });

  it('a run whose step loses its claim to injected freezes again and again completes, and the claims given up are no fault of the code (seed 2534190111 of seed 20261247\'s run)', async () => {
    // Its step 2 failed four times, the last a holder thawed after its claim was taken over, and the run
    // failed: the checker took that reason for a fault nobody injected. A lost claim is no failed try now:
    // the thawed holder steps away as from a crash (a delivery error the checker must trace to the freeze).
    const report = await awsSchedule(2534190111);
    expect(report.violations).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report).toMatchObject({ runs: 2, completed: 2, failed: 0, appliedTwice: 0, stepsLost: 0, stuck: 0 });
  });

  it('finds a planted defect: with the ledger claim bypassed, effects are applied twice', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 12 && totals.appliedTwice === 0; i++) add(totals, await awsSchedule(scheduleSeed(SEED, i), { sabotage: 'ledger-bypassed' }));
    expect(totals.appliedTwice).toBeGreaterThan(0);
    expect(totals.badSeeds.length).toBeGreaterThan(0);
  });

  it('finds a planted defect: without the sweeper, a run whose message was lost is left stuck', async () => {
    const totals = emptyTotals();
    for (let i = 0; i < 16 && totals.stuck === 0; i++) add(totals, await awsSchedule(scheduleSeed(SEED, i), { sabotage: 'no-sweeper' }));
    expect(totals.lostMessages).toBeGreaterThan(0);
    expect(totals.stuck).toBeGreaterThan(0);
    expect(totals.redriven).toBe(0);
  });
});

describe('the chaos invariants on the DynamoDB store', () => {
  let resources: TestResources | undefined;
  afterEach(() => resources?.close());
  const injected = (reason: string) => reason.includes('injected');

  it('a clean run through the Lambda handler passes; an effect applied twice, a lost step, a missing version and a missing ledger result are flagged', async () => {
    resources = await createTestResources('inv-aws');
    const res = resources;
    const applied = new Map<string, number>();
    const agent = defineAgent({
      name: 'inv', tools: [tool({
        name: 'write_row', description: 'w', input: z.object({ n: z.number().int() }), sideEffect: true,
        run: (input, ctx) => ctx.once(async () => { applied.set(ctx.idempotencyKey, (applied.get(ctx.idempotencyKey) ?? 0) + 1); return input; }),
      })],
    });
    const model: Model = {
      name: 'inv',
      decide: async (request) => (request.step <= 3 ? { kind: 'tool', tool: 'write_row', input: { n: request.step } } : { kind: 'done', summary: 'done' }),
    };
    const runtime = res.runtime();
    const runId = await startTestRun(runtime, agent, 'inv-aws-run');
    await driveRun({ resources: res, runId, spawn: () => new WorkerProcess({ resources: res, agent, model }) });
    const runs: RunExpectation[] = [{ runId, steps: 3, toolOf: () => 'write_row' }];

    const ledgerHasResult = async (key: string) => {
      const { Item } = await res.clients.doc.send(new GetCommand({ TableName: res.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK }, ConsistentRead: true }));
      return Item?.result !== undefined;
    };
    const clean = await checkInvariants({ store: runtime.store, runs, applied, injected, ledgerHasResult });
    expect(clean.violations).toEqual([]);
    expect(clean).toMatchObject({ completed: 1, completedSteps: 3, appliedTwice: 0, stepsLost: 0, stuck: 0 });

    const tampered = new Map(applied);
    tampered.set(`${runId}/step-1`, 2);
    tampered.delete(`${runId}/step-2`);
    await res.clients.doc.send(new DeleteCommand({ TableName: res.tableName, Key: { [PK]: runPk(runId), [SK]: checkpointSk(3) } }));
    // A completed step whose ledger record is gone: its effect could be applied again.
    await res.clients.doc.send(new DeleteCommand({ TableName: res.tableName, Key: { [PK]: ledgerPk(`${runId}/step-3`), [SK]: LEDGER_SK } }));
    const verdict = await checkInvariants({ store: runtime.store, runs, applied: tampered, injected, ledgerHasResult });
    expect(verdict.appliedTwice).toBe(1);
    expect(verdict.stepsLost).toBe(1);
    // Version 3 gone: a gap in the versions, and step 1 followed by step 3.
    expect(verdict.violations.map((v) => v.kind).sort()).toEqual(['applied-twice', 'history', 'history', 'ledger', 'step-lost']);
  });
});
