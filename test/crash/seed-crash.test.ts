import { afterEach, describe, expect, it } from 'vitest';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/** The two tests the user's pattern document requires, word for word in spirit: crash, restart, finish. */
describe('seed crash tests', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('raises after step 2 checkpoint; a restart with the same run id completes from step 3, steps 1 and 2 applied once', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const agent = rowsAgent(rows);
    const modelA = new StubModel(writeRowsScript(5));
    const a = workerProcess({ dbPath: db.path, agent, model: modelA, clock, workerId: 'worker-A', crashAt: { point: 'C6', step: 2 } });
    await start(a.deps);
    await expect(drain(a.deps, a.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    a.runtime.close();
    expect((await loadState(workerProcess({ dbPath: db.path, agent, model: modelA, clock, workerId: 'peek' }).runtime)).step).toBe(2);

    const modelB = new StubModel(writeRowsScript(5));
    const b = workerProcess({ dbPath: db.path, agent, model: modelB, clock, workerId: 'worker-B' });
    // The restart is a start with the same run id, as the document has it: it loads the step-2 checkpoint
    // (version 3: created, steps 1 and 2), creates nothing and resets nothing.
    expect(await start(b.deps)).toEqual({ runId: 'run', created: false, version: 3 });
    expect(await loadState(b.runtime)).toMatchObject({ status: 'running', step: 2 });
    await drain(b.deps, b.runtime, clock);

    expect(rows.timesReceived('run/step-1')).toBe(1);
    expect(rows.timesReceived('run/step-2')).toBe(1);
    expect(modelA.stepsAsked()).toEqual([1, 2]);
    expect(modelB.stepsAsked()).toEqual([3, 4, 5, 6]);
    const state = await loadState(b.runtime);
    expect(state.status).toBe('completed');
    expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5]);
    expect(state.steps.map((s) => s.workerId)).toEqual(['worker-A', 'worker-A', 'worker-B', 'worker-B', 'worker-B']);
    expect(rows.rows.size).toBe(5);
    b.runtime.close();
  });

  it("raises after step 3's tool call, before its checkpoint; the restart sends key run/step-3 again and it applies once", async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const agent = rowsAgent(rows);
    const a = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(5)), clock, workerId: 'worker-A', crashAt: { point: 'C4', step: 3 } });
    await start(a.deps);
    await expect(drain(a.deps, a.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    a.runtime.close();
    const rowCountAtCrash = rows.rows.size;
    expect(rowCountAtCrash).toBe(3);

    const modelB = new StubModel(writeRowsScript(5));
    const b = workerProcess({ dbPath: db.path, agent, model: modelB, clock, workerId: 'worker-B' });
    await drain(b.deps, b.runtime, clock);

    expect(rows.timesReceived('run/step-3')).toBe(2);
    // Applied once: only the first of the two calls wrote its row (a Map's keys are unique, so counting
    // them could not tell).
    expect(rows.timesApplied('run/step-3')).toBe(1);
    expect(rows.applied).toEqual(['run/step-1', 'run/step-2', 'run/step-3', 'run/step-4', 'run/step-5']);
    // The redo of step 3 did not add a row: the count after step 3 is what it was at the crash.
    const state = await loadState(b.runtime);
    expect(state.steps[2]!.result.text).toContain(`"rowCount":${rowCountAtCrash}`);
    expect(state.steps[2]!.result.text).toContain('"applied":false');
    // The recorded decision was replayed: the model was not asked for step 3 again.
    expect(modelB.stepsAsked()).toEqual([4, 5, 6]);
    expect(state.status).toBe('completed');
    expect(rows.rows.size).toBe(5);
    b.runtime.close();
  });
});
