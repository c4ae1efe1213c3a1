import { afterEach, describe, expect, it } from 'vitest';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { advance } from '../../lib/engine/advance.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

describe('two workers on one run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('a slow worker that comes back after another took over is rejected as stale and stops', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    let releaseA!: () => void;
    const holdA = new Promise<void>((resolve) => { releaseA = resolve; });
    let reachedA!: () => void;
    const aReached = new Promise<void>((resolve) => { reachedA = resolve; });
    // Worker A stalls inside step 2's tool, after its effect, as a slow or paused process would.
    const slowAgent = rowsAgent(rows, { afterWrite: async (step) => { if (step === 2) { reachedA(); await holdA; } } });
    const fastAgent = rowsAgent(rows);
    const a = workerProcess({ dbPath: db.path, agent: slowAgent, model: new StubModel(writeRowsScript(4)), clock, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent: fastAgent, model: new StubModel(writeRowsScript(4)), clock, workerId: 'B' });
    await start(a.deps);

    // A does step 1, then takes the message for step 2 and stalls in the tool.
    const [m1] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await handleDelivery(a.deps, m1!);
    await a.runtime.queue.ack(m1!);
    const [m2] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, m2!);
    await aReached;

    // A's message times out; B receives it, replays the recorded decision with the same key, and finishes.
    clock.advance(VISIBILITY_MS + 1);
    await drain(b.deps, b.runtime, clock);
    expect((await loadState(b.runtime)).status).toBe('completed');

    // A wakes up: its checkpoint write is stale, so it stops without writing anything.
    const historyBefore = await b.runtime.store.history('run');
    releaseA();
    const handled = await aStep;
    expect(handled.action).toBe('ack');
    expect(handled).not.toHaveProperty('outcome');
    expect(await b.runtime.store.history('run')).toEqual(historyBefore);
    expect(await a.runtime.queue.ack(m2!)).toBe(false); // its receipt expired when B took the message

    expect(rows.timesReceived('run/step-2')).toBe(2);
    expect(rows.rows.size).toBe(4);
    const state = await loadState(b.runtime);
    expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3, 4]);
    expect(state.steps[1]!.workerId).toBe('B');
    a.runtime.close(); b.runtime.close();
  });

  it('of two workers that ask the model for the same step, only the first decision is recorded; the other stops before its tool', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const agent = rowsAgent(rows);
    let bInsideModel!: () => void;
    const bAsked = new Promise<void>((resolve) => { bInsideModel = resolve; });
    let letBAnswer!: () => void;
    const bMayAnswer = new Promise<void>((resolve) => { letBAnswer = resolve; });
    const script = writeRowsScript(3);
    const slowModel = new StubModel(script);
    const originalDecide = slowModel.decide.bind(slowModel);
    slowModel.decide = async (request) => { bInsideModel(); await bMayAnswer; return originalDecide(request); };
    const a = workerProcess({ dbPath: db.path, agent, model: new StubModel(script), clock, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent, model: slowModel, clock, workerId: 'B' });
    await start(a.deps);

    const bStep = advance(b.deps, 'run', { expectVersion: 1 });
    await bAsked;
    const aResult = await advance(a.deps, 'run', { expectVersion: 1 });
    expect(aResult.kind).toBe('advanced');
    letBAnswer();
    await expect(bStep).rejects.toBeInstanceOf(StaleVersionError);
    expect(rows.received).toEqual(['run/step-1']);
    const history = await a.runtime.store.history('run');
    expect(history.map((h) => [h.version, h.workerId])).toEqual([[1, 'A'], [2, 'A']]);
    a.runtime.close(); b.runtime.close();
  });

  it('workers taking turns on one run each see every step, including those the other wrote since', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const agent = rowsAgent(rows);
    const modelA = new StubModel(writeRowsScript(6));
    const modelB = new StubModel(writeRowsScript(6));
    const a = workerProcess({ dbPath: db.path, agent, model: modelA, clock, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent, model: modelB, clock, workerId: 'B' });
    await start(a.deps);
    // A, A, B, A, B, B, A: each worker keeps the steps it decoded and reads only what is new.
    for (const w of [a, a, b, a, b, b, a]) await advance(w.deps, 'run');
    const state = await loadState(a.runtime);
    expect(state).toMatchObject({ status: 'completed', step: 6 });
    expect(state.steps.map((s) => s.workerId)).toEqual(['A', 'A', 'B', 'A', 'B', 'B']);
    // Each prompt listed exactly the steps completed before it, whoever wrote them.
    for (const r of [...modelA.requests, ...modelB.requests]) {
      expect(r.prompt.match(/^\d+\. write_row/gm)?.length ?? 0).toBe(r.step - 1);
    }
    expect([...modelA.stepsAsked(), ...modelB.stepsAsked()].sort()).toEqual([1, 2, 3, 4, 5, 6, 7]);
    a.runtime.close(); b.runtime.close();
  });
});

