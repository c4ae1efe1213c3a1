import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentDefinition } from '../../lib/agent.ts';
import { advance } from '../../lib/engine/advance.ts';
import { findDrift } from '../../lib/engine/drift.ts';
import { startRun } from '../../lib/engine/start.ts';
import type { CheckpointStore, ListRunsQuery, ModelReply } from '../../lib/ports.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { driftAgent } from '../support/drift-agents/build.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';
import { readRecord, writeRecord } from '../support/local-records.ts';

const AGENTS = join(ROOT, 'test/support/drift-agents');
const db = tempDb();
afterAll(() => db.cleanup());

/** Each run's goal says what the model does at every step. */
function script(step: number, prompt: string): ModelReply {
  if (prompt.includes('goal-finish')) return step === 1 ? { kind: 'tool', tool: 'count_rows', input: {} } : { kind: 'done', summary: 'counted' };
  if (prompt.includes('goal-write')) return { kind: 'tool', tool: 'write_row', input: { row: step } };
  if (prompt.includes('goal-approve')) return { kind: 'tool', tool: 'request_approval', input: { request: 'drop the old table' } };
  return { kind: 'tool', tool: 'count_rows', input: {} };
}

const clock = new ManualClock();

async function runSteps(agent: AgentDefinition, runId: string, goal: string, steps: number, crashAt?: number) {
  const { deps, runtime } = workerProcess({
    dbPath: db.path, agent, model: new StubModel(script), clock, workerId: 'maker',
    ...(crashAt ? { crashAt: { point: 'C3' as const, step: crashAt } } : {}),
  });
  try {
    await startRun(deps, { runId, goal });
    for (let i = 0; i < steps; i++) await advance(deps, runId);
    if (crashAt) await expect(advance(deps, runId)).rejects.toBeInstanceOf(SimulatedCrash);
  } finally {
    runtime.close();
  }
}

function dump(): unknown {
  const { runtime } = workerProcess({ dbPath: db.path, agent: driftAgent(), model: new StubModel(script), clock, workerId: 'reader' });
  try {
    return ['runs', 'checkpoints', 'steps', 'queue'].map((table) => runtime.db.prepare(`SELECT * FROM ${table} ORDER BY 1, 2`).all());
  } finally {
    runtime.close();
  }
}

const drift = (agent: string, ...args: string[]) => stepwiseCli(['drift', '--agent', join(AGENTS, agent), ...args], { STEPWISE_DB: db.path });

describe('stepwise drift: which paused runs a new agent cannot resume', () => {
  beforeAll(async () => {
    const agent = driftAgent();
    await runSteps(agent, 'done-1', 'goal-finish', 2);
    await runSteps(agent, 'pending-1', 'goal-write', 1, 2);
    await runSteps(agent, 'waiting-1', 'goal-approve', 1);
    await runSteps(agent, 'plain-1', 'goal-count', 1);
    // Another agent's run in the same file is not this agent's to resume, whatever its tools.
    await runSteps(rowsAgent(new FakeRows()), 'other-1', 'goal-write', 0, 1);
  });

  it('passes (exit 0) when the new agent can resume every running and waiting run, changing nothing', async () => {
    const before = dump();
    const r = await drift('current.ts');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain('checked 3 running or waiting runs of agent drift-agent: this code and agent can resume every one');
    // Which agents, and what a rename without formerNames would need: the deploy gate cannot tell the two apart.
    expect(r.out).toContain('1 run of other agents not checked (rows-agent: 1); if agent drift-agent was renamed from one of them, add formerNames: ["rows-agent"] to its defineAgent, or no worker of it will resume those runs');
    expect(dump()).toEqual(before);
  });

  it('fails (exit 3) when a recorded decision calls a tool the new agent renamed, naming the run and the tool', async () => {
    const r = await drift('renamed.ts');
    expect(r.code).toBe(3);
    expect(r.out).toContain('checked 3 running or waiting runs of agent drift-agent: 1 cannot be resumed');
    expect(r.out).toMatch(/pending-1\s+running\s+1\s+\d+\s+step 2: the recorded decision calls tool "write_row", which agent drift-agent no longer has/);
    // The waiting run's tool is still there, and the others have no recorded decision to run.
    expect(r.out).not.toMatch(/waiting-1|plain-1|done-1|other-1/);
  });

  it('fails when a recorded decision no longer fits the tool\'s new input schema', async () => {
    const r = await drift('changed-input.ts', '--json');
    expect(r.code).toBe(3);
    const report = JSON.parse(r.out) as { agent: string; checked: number; blocked: { runId: string; problem: string }[] };
    expect(report).toMatchObject({ agent: 'drift-agent', checked: 3, otherAgents: 1, others: [{ agent: 'rows-agent', runs: 1 }] });
    expect(report.blocked.map((b) => b.runId)).toEqual(['pending-1']);
    expect(report.blocked[0]!.problem).toMatch(/tool "write_row" no longer fits its input schema \(table: /);
  });

  it('fails on a checkpoint this code cannot read: a newer format, saying which one it needs; status says so too', async () => {
    await runSteps(driftAgent(), 'newer-1', 'goal-count', 1);
    const { runtime } = workerProcess({ dbPath: db.path, agent: driftAgent(), model: new StubModel(script), clock, workerId: 'tamper' });
    const record = readRecord(runtime.db, 'newer-1', 1);
    writeRecord(runtime.db, 'newer-1', 1, JSON.stringify({ ...JSON.parse(record), formatVersion: 3 }));
    runtime.close();

    const r = await drift('current.ts', '--json');
    expect(r.code).toBe(3);
    const report = JSON.parse(r.out) as { blocked: { runId: string; problem: string; needs?: string }[] };
    expect(report.blocked).toEqual([expect.objectContaining({ runId: 'newer-1', needs: 'step format 3' })]);
    expect(report.blocked[0]!.problem).toMatch(/step 1 has step format 3, but this code reads step format 1/);

    const status = await stepwiseCli(['status', 'newer-1'], { STEPWISE_DB: db.path });
    expect(status.code).toBe(0);
    expect(status.out).toContain('run newer-1: running, but this code cannot resume it: it needs step format 3');
    const json = JSON.parse((await stepwiseCli(['status', 'newer-1', '--json'], { STEPWISE_DB: db.path })).out) as Record<string, unknown>;
    expect(json).toMatchObject({ runId: 'newer-1', status: 'running', needs: 'step format 3' });

    // The run table says it too, on that run's row only: it would otherwise list it as plainly running.
    const table = await stepwiseCli(['status'], { STEPWISE_DB: db.path });
    expect(table.out.split('\n')[0]).toMatch(/ NEEDS$/);
    expect(table.out).toMatch(/^newer-1 +running .* step format 3$/m);
    expect(table.out).toMatch(/^plain-1 +running .*Z$/m);
    const rows = JSON.parse((await stepwiseCli(['status', '--json'], { STEPWISE_DB: db.path })).out) as { runId: string; needs?: string }[];
    expect(rows.filter((row) => row.needs)).toEqual([expect.objectContaining({ runId: 'newer-1', needs: 'step format 3' })]);
  });

  it('refuses to run without an agent, with exit code 2', async () => {
    const r = await stepwiseCli(['drift'], { STEPWISE_DB: db.path, STEPWISE_AGENT: '' });
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--agent/);
  });

  // Last: it moves a run of the shared file on.
  it('a run that moves between the listing and its read is reported at the step and version of that read', async () => {
    await runSteps(driftAgent(), 'moving-1', 'goal-write', 1, 2);
    const { runtime } = workerProcess({ dbPath: db.path, agent: driftAgent(), model: new StubModel(script), clock, workerId: 'reader' });
    // The store lists the runs; then, before drift reads moving-1, a worker commits its step 2 and records
    // its decision for step 3 (a crash after it), so the run is still blocked, one step on.
    let moved = false;
    const store: CheckpointStore = Object.assign(Object.create(runtime.store) as CheckpointStore, {
      list: async (query?: ListRunsQuery) => {
        const runs = await runtime.store.list(query);
        if (!moved) {
          moved = true;
          await runSteps(driftAgent(), 'moving-1', 'goal-write', 1, 3);
        }
        return runs;
      },
    });
    try {
      const report = await findDrift(store, driftAgent('renamed'));
      const after = (await runtime.store.load('moving-1'))!;
      expect(report.blocked.find((b) => b.runId === 'moving-1')).toEqual({
        runId: 'moving-1', status: 'running', step: 2, version: after.version, problem: expect.stringMatching(/^step 3: the recorded decision calls tool "write_row"/),
      });
    } finally {
      runtime.close();
    }
  });
});
