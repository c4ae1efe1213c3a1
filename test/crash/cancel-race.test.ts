import { afterEach, describe, expect, it } from 'vitest';
import { cancelRun } from '../../lib/engine/operate/cancel.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { captureLogs } from '../aws/log-capture.ts';
import { gate, heldModel } from '../support/gate.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * A cancel racing a step on two workers. A holds step 2 (in its tool, or in its model call) while the
 * cancel is requested and B works the queue: the step A is running finishes and is recorded, and no step
 * after the cancel starts, on either worker.
 */
describe('cancel racing a running step on two workers', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  async function stepOne(w: ReturnType<typeof workerProcess>) {
    const [m1] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await handleDelivery(w.deps, m1!);
    await w.runtime.queue.ack(m1!);
  }

  it('a step held in its tool when the cancel comes commits; no step after it starts', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const held = gate();
    const modelA = new StubModel(writeRowsScript(5));
    const modelB = new StubModel(writeRowsScript(5));
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(rows, { afterWrite: async (step) => { if (step === 2) await held.wait(); } }), model: modelA, clock, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: modelB, clock, workerId: 'B' });
    await start(a.deps);
    await stepOne(a);
    const [m2] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, m2!);
    await held.reached;

    expect(await cancelRun(b.deps, 'run', { by: 'ops@example.com', reason: 'stop' })).toMatchObject({ outcome: 'requested', version: 2 });
    // A holds its message while it works, and the cancel's re-drive adds none next to it: B has nothing.
    expect(await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS })).toEqual([]);
    held.open();
    const handled = await aStep;
    expect(handled).toMatchObject({ action: 'ack', acked: true, outcome: { kind: 'advanced', state: { status: 'running', step: 2 } } });
    // The step's own transaction acked the message: nothing is left to ack.
    expect(await a.runtime.queue.ack(m2!)).toBe(false);

    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state).toMatchObject({ status: 'cancelled', step: 2, reason: expect.stringContaining('cancelled by ops@example.com') });
    expect(state.steps.map((s) => [s.step, s.workerId])).toEqual([[1, 'A'], [2, 'A']]);
    expect(rows.received).toEqual(['run/step-1', 'run/step-2']);
    expect(modelA.stepsAsked()).toEqual([1, 2]);
    expect(modelB.stepsAsked()).toEqual([]);
    expect((await b.runtime.store.history('run')).map((h) => [h.version, h.step, h.status, h.workerId])).toEqual([
      [1, 0, 'running', 'A'], [2, 1, 'running', 'A'], [3, 2, 'running', 'A'], [4, 2, 'cancelled', 'B'],
    ]);
    a.runtime.close(); b.runtime.close();
  });

  it('a step held in its model call when the cancel comes runs its tool and commits; the next one never starts', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const held = gate();
    const agent = rowsAgent(rows);
    const inner = new StubModel(writeRowsScript(5));
    const a = workerProcess({ dbPath: db.path, agent, model: inner, clock, workerId: 'A' });
    await start(a.deps);
    await stepOne(a);
    const slow = workerProcess({ dbPath: db.path, agent, model: heldModel(inner, held), clock, workerId: 'A2' });
    const b = workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(5)), clock, workerId: 'B' });
    const [m2] = await slow.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const step = handleDelivery(slow.deps, m2!);
    await held.reached;
    await cancelRun(b.deps, 'run', { by: 'ops@example.com' });
    held.open();
    await step;
    await slow.runtime.queue.ack(m2!);
    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state).toMatchObject({ status: 'cancelled', step: 2 });
    expect(rows.received).toEqual(['run/step-1', 'run/step-2']);
    expect(inner.stepsAsked()).toEqual([1, 2]);
    a.runtime.close(); slow.runtime.close(); b.runtime.close();
  });

  it('a worker frozen in its step past its message\'s timeout loses the step to the cancel, and nothing after it starts', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const held = gate();
    const modelB = new StubModel(writeRowsScript(5));
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(rows, { afterWrite: async (step) => { if (step === 2) await held.wait(); } }), model: new StubModel(writeRowsScript(5)), clock, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: modelB, clock, workerId: 'B' });
    const { log, lines } = captureLogs();
    a.deps.log = log;
    await start(a.deps);
    await stepOne(a);
    const [m2] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, m2!);
    await held.reached;
    await cancelRun(b.deps, 'run', { by: 'ops@example.com' });
    // A froze: its message comes back to B, which finds the cancel at the boundary and stops the run.
    clock.advance(VISIBILITY_MS + 1);
    await drain(b.deps, b.runtime, clock);
    expect(await loadState(b.runtime)).toMatchObject({ status: 'cancelled', step: 1 });
    // A wakes up: its commit is stale; it writes nothing and starts nothing.
    const historyBefore = await b.runtime.store.history('run');
    held.open();
    expect(await aStep).toMatchObject({ action: 'ack' });
    expect(await b.runtime.store.history('run')).toEqual(historyBefore);
    expect(await loadState(b.runtime)).toMatchObject({ status: 'cancelled', step: 1 });
    // Step 2's effect was applied once, under its own key, by the step that was running; nothing after it.
    expect(rows.received).toEqual(['run/step-1', 'run/step-2']);
    expect(modelB.stepsAsked()).toEqual([]);
    // A's line says the run was cancelled under it and what that leaves, not that another worker stepped it.
    expect(lines.find((l) => l.event === 'stale-write')).toMatchObject({
      level: 40, runId: 'run', status: 'cancelled',
      msg: expect.stringMatching(/^stale write rejected: run run was cancelled while this worker held its step past its message's visibility timeout \(cancelled by ops@example\.com at .*\); the step is not recorded, and an effect it applied under its idempotency key stays applied$/),
    });
    a.runtime.close(); b.runtime.close();
  });
});
