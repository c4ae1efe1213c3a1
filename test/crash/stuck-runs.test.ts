import { afterEach, describe, expect, it } from 'vitest';
import { handleDelivery, type Handled } from '../../lib/engine/handle-message.ts';
import type { Delivery } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { gate, heldModel } from '../support/gate.ts';
import { ManualClock, SimulatedCrash, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * Two workers on one message (the first one paused past its visibility timeout, so the second received
 * it again and holds the newest receipt), and the one that got further dies. The survivor's write is
 * rejected as stale; it must not acknowledge its way out and leave the run `running` with nothing to move it.
 */

async function settle(queue: { ack(d: Delivery): Promise<boolean>; release(d: Delivery, ms: number): Promise<void> }, delivery: Delivery, handled: Handled): Promise<void> {
  if (handled.action === 'ack') await queue.ack(delivery);
  else await queue.release(delivery, handled.delayMs);
}

describe('a run is never left running with nothing to move it (SQLite)', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('(a) the worker whose decision lost the race hands the message back, so the recorded call runs though the recorder died', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const agent = rowsAgent(rows);
    const atA = gate();
    const atB = gate();
    // A would write row 1; B, asked the same question, would write row 101: only one decision may stand.
    const a = workerProcess({ dbPath: db.path, agent, model: heldModel(new StubModel(writeRowsScript(3)), atA), clock, workerId: 'A', crashAt: { point: 'C3', step: 1 } });
    const bScript = writeRowsScript(3);
    const b = workerProcess({
      dbPath: db.path, agent, clock, workerId: 'B',
      model: heldModel(new StubModel((step) => {
        const reply = bScript(step);
        return reply.kind === 'tool' && step === 1 ? { ...reply, input: { row: 101 } } : reply;
      }), atB),
    });
    await start(a.deps);

    const [forA] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, forA!);
    await atA.reached;
    clock.advance(VISIBILITY_MS + 1);
    const [forB] = await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(forB!.body).toBe(forA!.body);
    const bStep = handleDelivery(b.deps, forB!);
    await atB.reached;

    // A records its decision for step 1 and dies before running the tool.
    atA.open();
    await expect(aStep).rejects.toBeInstanceOf(SimulatedCrash);
    a.runtime.close();
    // B's decision for the same step is refused while the run is still at version 1. B holds the newest
    // receipt: it hands the message back instead of acking it.
    atB.open();
    const handled = await bStep;
    expect(handled).toMatchObject({ action: 'release', runId: 'run' });
    await settle(b.runtime.queue, forB!, handled);
    expect(b.runtime.queue.depth()).toBe(1);

    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state.status).toBe('completed');
    expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3]);
    // Step 1 ran A's recorded call (row 1) under the step's key, once; B's own answer was dropped.
    expect(state.steps[0]).toMatchObject({ input: { row: 1 }, idempotencyKey: 'run/step-1' });
    expect([...rows.rows.entries()]).toEqual([['run/step-1', 1], ['run/step-2', 2], ['run/step-3', 3]]);
    expect(rows.timesReceived('run/step-1')).toBe(1);
    expect((await b.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
    b.runtime.close();
  });

  it('(b) the loser of a commit race re-sends the next message the winner died before sending', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const inA = gate();
    const inB = gate();
    // Both workers stop inside step 1's tool, after its effect, until the test lets them go on.
    const agentA = rowsAgent(rows, { afterWrite: async (step) => { if (step === 1) await inA.wait(); } });
    const agentB = rowsAgent(rows, { afterWrite: async (step) => { if (step === 1) await inB.wait(); } });
    const a = workerProcess({ dbPath: db.path, agent: agentA, model: new StubModel(writeRowsScript(3)), clock, workerId: 'A', crashAt: { point: 'C7', step: 1 } });
    const b = workerProcess({ dbPath: db.path, agent: agentB, model: new StubModel(writeRowsScript(3)), clock, workerId: 'B' });
    await start(a.deps);

    const [forA] = await a.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const aStep = handleDelivery(a.deps, forA!);
    await inA.reached;
    clock.advance(VISIBILITY_MS + 1);
    const [forB] = await b.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const bStep = handleDelivery(b.deps, forB!);
    await inB.reached;

    // A wins: it writes checkpoint 2, then dies before sending the message for it.
    inA.open();
    await expect(aStep).rejects.toBeInstanceOf(SimulatedCrash);
    a.runtime.close();
    expect((await b.runtime.store.load('run'))).toMatchObject({ version: 2, status: 'running' });
    // B's checkpoint is stale; it holds the newest receipt of the message for version 1.
    inB.open();
    const handled = await bStep;
    expect(handled).toMatchObject({ action: 'ack', runId: 'run' });
    await settle(b.runtime.queue, forB!, handled);
    expect(b.runtime.queue.depth()).toBe(1);

    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    expect(state.status).toBe('completed');
    expect(state.steps.map((s) => [s.step, s.workerId])).toEqual([[1, 'A'], [2, 'B'], [3, 'B']]);
    expect([...rows.rows.keys()]).toEqual(['run/step-1', 'run/step-2', 'run/step-3']);
    expect((await b.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
    b.runtime.close();
  });

  it('a repeated start re-drives a running run whose message was consumed without a successor, past the queue\'s deduplication', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(2)), clock, workerId: 'W' });
    await start(w.deps);
    const [first] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await settle(w.runtime.queue, first!, await handleDelivery(w.deps, first!)); // step 1: now at version 2
    // The message for version 2 is acknowledged by a worker that then does nothing more (older code
    // acked a stale write this way): its deduplication record stays for a day.
    const [lost] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await w.runtime.queue.ack(lost!);
    expect(w.runtime.queue.depth()).toBe(0);

    const again = await start(w.deps);
    expect(again).toEqual({ runId: 'run', created: false, version: 2 });
    expect(w.runtime.queue.depth()).toBe(1);
    // A start while the message is there adds nothing.
    await start(w.deps);
    expect(w.runtime.queue.depth()).toBe(1);

    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'completed', step: 2 });
    expect((await w.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3, 4]);
    w.runtime.close();
  });
});
