import { copyFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { summariesDue } from '../../lib/core/condensed.ts';
import { RECORD_FORMATS, type RunState } from '../../lib/core/state.ts';
import { completeStep, initialState } from '../../lib/core/transitions.ts';
import { findDrift } from '../../lib/engine/drift.ts';
import { blockCost } from '../../lib/llm/cost.ts';
import type { CheckpointStore } from '../../lib/ports.ts';
import { META, recordFor } from '../support/states.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import type { LocalRuntime } from '../../lib/local/runtime.ts';
import { FixtureModel, fixtureAgent } from '../fixtures/formats/fixture-agent.ts';
import { FIXTURE_EPOCH, fixturePath } from '../fixtures/formats/resume.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, VISIBILITY_MS, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { readRecord, writeRecord } from '../support/local-records.ts';

/** Everything the database holds about runs, to show that a refusal changed nothing. */
function dump(runtime: LocalRuntime): unknown {
  return ['runs', 'checkpoints', 'steps', 'ledger'].map((table) => runtime.db.prepare(`SELECT * FROM ${table} ORDER BY 1, 2`).all());
}

/** Handles the run's next message once, as a worker loop would. */
async function deliverOnce(deps: Parameters<typeof handleDelivery>[0], runtime: LocalRuntime) {
  const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
  if (!delivery) throw new Error('no message');
  const handled = await handleDelivery(deps, delivery);
  if (handled.action === 'ack') await runtime.queue.ack(delivery);
  else await runtime.queue.release(delivery, handled.delayMs);
  return handled;
}

describe('code drift under a paused run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /** A run of rows-agent stopped after its decision for step 3 was recorded (a crash at C3). */
  async function pausedAtDecision(rows = new FakeRows()) {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(writeRowsScript(5));
    const first = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model, clock, workerId: 'A', crashAt: { point: 'C3', step: 3 } });
    await start(first.deps);
    await expect(drain(first.deps, first.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    first.runtime.close();
    clock.advance(VISIBILITY_MS + 1);
    return { clock, model, rows };
  }

  function worker(agent: AgentDefinition, clock: ManualClock, model = new StubModel(writeRowsScript(5))) {
    return workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'B' });
  }

  it('leaves a run with a step record of a newer format as it is: handed back, nothing written, nothing run', async () => {
    const { clock, rows } = await pausedAtDecision();
    const { deps, runtime } = worker(rowsAgent(rows), clock);
    const record = readRecord(runtime.db, 'run', 2);
    writeRecord(runtime.db, 'run', 2, JSON.stringify({ ...JSON.parse(record), formatVersion: 2 }));
    const before = dump(runtime);
    const received = rows.received.length;
    const handled = await deliverOnce(deps, runtime);
    expect(handled).toMatchObject({ action: 'release' });
    expect(dump(runtime)).toEqual(before);
    expect(rows.received.length).toBe(received);
    runtime.close();
  });

  it('refuses a recorded decision with a field it does not know, rather than running it without', async () => {
    const { clock, rows } = await pausedAtDecision();
    const { deps, runtime } = worker(rowsAgent(rows), clock);
    const row = runtime.db.prepare("SELECT decision FROM steps WHERE run_id = 'run' AND step = 3").get() as { decision: string };
    runtime.db.prepare("UPDATE steps SET decision = ? WHERE run_id = 'run' AND step = 3").run(JSON.stringify({ ...JSON.parse(row.decision), dryRun: true }));
    const before = dump(runtime);
    const handled = await deliverOnce(deps, runtime);
    expect(handled).toMatchObject({ action: 'release' });
    expect(dump(runtime)).toEqual(before);
    expect(rows.timesReceived('run/step-3')).toBe(0);
    runtime.close();
  });

  it('fails a run whose recorded tool was renamed, naming the tool and the fix, and keeps the decision for retry', async () => {
    const { clock, rows } = await pausedAtDecision();
    const renamed = defineAgent({
      name: 'rows-agent',
      tools: [tool({ name: 'insert_row', description: 'Write one row.', input: z.object({ row: z.number() }), sideEffect: true, run: () => 'ok' })],
    });
    const { deps, runtime } = worker(renamed, clock);
    const before = decodeState((await runtime.store.load('run'))!).pending;
    expect(before).toMatchObject({ step: 3, tool: 'write_row' });
    await drain(deps, runtime, clock);
    const stored = (await runtime.store.load('run'))!;
    const state = decodeState(stored);
    expect(state.status).toBe('failed');
    expect(state.reason).toMatch(/step 3: the recorded decision calls tool "write_row", which agent rows-agent no longer has/);
    expect(state.reason).toMatch(/redeploy an agent with tool "write_row".*stepwise retry run/);
    // The decision stays: a retry under the redeployed agent runs this very call with its key.
    expect(state.pending).toEqual(before);
    expect(stored.pending).toBeDefined();
    expect(rows.timesReceived('run/step-3')).toBe(0);
    runtime.close();
  });

  it('fails a run whose recorded decision no longer fits its tool\'s new input, without running the tool', async () => {
    const { clock, rows } = await pausedAtDecision();
    let ran = 0;
    const changed = defineAgent({
      name: 'rows-agent',
      tools: [tool({
        name: 'write_row', description: 'Write one row to a table.', sideEffect: true,
        input: z.object({ row: z.number(), table: z.string() }),
        run: () => { ran++; return 'ok'; },
      })],
    });
    const { deps, runtime } = worker(changed, clock);
    await drain(deps, runtime, clock);
    const state = decodeState((await runtime.store.load('run'))!);
    expect(state.status).toBe('failed');
    expect(state.reason).toMatch(/step 3: the recorded decision for tool "write_row" no longer fits its input schema \(table: /);
    expect(state.reason).toMatch(/stepwise retry run/);
    expect(state.pending).toMatchObject({ step: 3, tool: 'write_row', input: { row: 3 } });
    expect(ran).toBe(0);
    expect(rows.timesReceived('run/step-3')).toBe(0);
    runtime.close();
  });

  it('leaves a run alone when the idempotency record of its step is of a newer format: nothing counted, nothing run', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const onceAgent = defineAgent({
      name: 'rows-agent',
      tools: [tool({
        name: 'write_row', description: 'Write one row.', input: z.object({ row: z.number() }), sideEffect: true,
        run: (input, ctx) => ctx.once(async () => rows.apply(ctx.idempotencyKey, input.row)),
      })],
    });
    const first = workerProcess({ dbPath: db.path, agent: onceAgent, model: new StubModel(writeRowsScript(5)), clock, workerId: 'A', crashAt: { point: 'C4', step: 3 } });
    await start(first.deps);
    await expect(drain(first.deps, first.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    first.runtime.close();
    clock.advance(VISIBILITY_MS + 1);
    const { deps, runtime } = worker(onceAgent, clock);
    runtime.db.prepare("UPDATE ledger SET format = 2 WHERE key = 'run/step-3'").run();
    const before = dump(runtime);
    const handled = await deliverOnce(deps, runtime);
    expect(handled).toMatchObject({ action: 'release' });
    expect(dump(runtime)).toEqual(before);
    expect(rows.timesReceived('run/step-3')).toBe(1);
    runtime.close();
  });

  it('leaves a waiting run with a wait record of a newer format as it is when its message or timer comes', async () => {
    db = tempDb();
    copyFileSync(fixturePath(2, 'sqlite.db'), db.path);
    const clock = new ManualClock(FIXTURE_EPOCH + 3600_000);
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: fixtureAgent(), model: new FixtureModel(), clock, workerId: 'B' });
    const { version, head } = runtime.db.prepare("SELECT c.version, c.head FROM checkpoints c WHERE c.run_id = 'waiting-1' ORDER BY c.version DESC LIMIT 1").get() as { version: number; head: string };
    const parsed = JSON.parse(head) as { wait: Record<string, unknown> };
    runtime.db.prepare("UPDATE checkpoints SET head = ? WHERE run_id = 'waiting-1' AND version = ?").run(JSON.stringify({ ...parsed, wait: { ...parsed.wait, formatVersion: RECORD_FORMATS.wait + 1 } }), version);
    const before = dump(runtime);
    const queued = runtime.db.prepare('SELECT count(*) AS n FROM queue').get();
    const handled = await handleDelivery(deps, { body: JSON.stringify({ runId: 'waiting-1', version }), receiveCount: 1 });
    expect(handled).toMatchObject({ action: 'release', runId: 'waiting-1' });
    expect(dump(runtime)).toEqual(before);
    // No timer was set for a wait this code cannot read.
    expect(runtime.db.prepare('SELECT count(*) AS n FROM queue').get()).toEqual(queued);
    runtime.close();
  });
});

describe('the drift check of a long run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /** A running run of rows-agent with `steps` steps, each checkpoint with the summaries it condensed (`price`: with their cost). */
  async function longRun(steps: number, options: { budget?: { usd: number }; priced: boolean }) {
    db = tempDb();
    const agent = rowsAgent(new FakeRows());
    const { runtime } = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(5)), clock: new ManualClock(), workerId: 'A' });
    let state: RunState = { ...initialState({ runId: 'long', agent: agent.name, goal: 'copy the rows', stepCap: 1000, now: 1_000 }), ...(options.budget ? { budget: options.budget } : {}) };
    await runtime.store.create(state, META);
    for (let n = 1; n <= steps; n++) {
      const record = { ...recordFor('long', n), usage: { inputTokens: 10, outputTokens: 2, cacheWriteTokens: 0, cacheReadTokens: 0 }, model: 'claude-opus-5-5' };
      state = completeStep(state, record, 2_000 + n);
      const summaries = summariesDue(state, options.priced ? blockCost : undefined);
      await runtime.store.commit({ runId: 'long', expectedVersion: n, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META });
    }
    const reads: { options: unknown; records: number }[] = [];
    const store: CheckpointStore = Object.assign(Object.create(runtime.store) as CheckpointStore, {
      load: async (runId: string, loadOptions?: Parameters<CheckpointStore['load']>[1]) => {
        const stored = await runtime.store.load(runId, loadOptions);
        if (stored) reads.push({ options: loadOptions, records: stored.steps.length });
        return stored;
      },
    });
    return { agent, runtime, store, reads };
  }

  it('reads what a resume reads: the block summaries and the records after them, not every record', async () => {
    const { agent, runtime, store, reads } = await longRun(450, { priced: true });
    const report = await findDrift(store, agent);
    expect(report).toMatchObject({ checked: 1, blocked: [] });
    expect(reads).toEqual([{ options: { recent: true }, records: 150 }]);
    runtime.close();
  });

  it('reads every record of a run whose dollar budget needs a block summarised without its cost, as its resume does', async () => {
    const { agent, runtime, store, reads } = await longRun(450, { budget: { usd: 100 }, priced: false });
    expect((await findDrift(store, agent)).checked).toBe(1);
    expect(reads).toEqual([{ options: { recent: true }, records: 150 }, { options: undefined, records: 450 }]);
    runtime.close();
  });

  it('judges a record the bounded read cannot decode on a full read, as a resume does, and reports the run at its step', async () => {
    const { agent, runtime, store } = await longRun(450, { priced: true });
    writeRecord(runtime.db, 'long', 449, '{"step":449');
    const report = await findDrift(store, agent);
    expect(report.blocked).toEqual([{ runId: 'long', status: 'running', step: 450, version: 451, problem: expect.stringMatching(/step 449/) }]);
    runtime.close();
  });
});

