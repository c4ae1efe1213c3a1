import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { RunStateError, UnknownRunError } from '../../lib/core/errors.ts';
import { advance } from '../../lib/engine/advance.ts';
import { deleteRun } from '../../lib/engine/operate/delete.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import type { CheckpointStore } from '../../lib/ports.ts';
import { OutboxNotifier, readOutbox } from '../../lib/waits/outbox-notifier.ts';
import { ManualClock, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/** write_row applies its effect through ctx.once, so the ledger decides whether it runs; step 2's output is a blob. */
function onceAgent(effects: string[], failAt?: number) {
  return defineAgent({
    name: 'once-rows',
    tools: [tool({
      name: 'write_row', description: 'Write one row, once per key.', input: z.object({ row: z.number() }), sideEffect: true,
      run: async (input, ctx) => {
        if (ctx.step === failAt) throw new Error('the database is down');
        const applied = await ctx.once(() => { effects.push(ctx.idempotencyKey); return { row: input.row }; });
        return ctx.step === 2 ? { ...applied, log: 'x'.repeat(10_000) } : applied;
      },
    })],
  });
}

describe('deleting a run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('deletes an ended run and its idempotency records: a new run of the same id applies its effects again; prune frees its blobs', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const effects: string[] = [];
    const first = workerProcess({ dbPath: db.path, agent: onceAgent(effects), model: new StubModel(writeRowsScript(3)), clock, workerId: 'A' });
    await start(first.deps);
    await drain(first.deps, first.runtime, clock);
    expect(await loadState(first.runtime)).toMatchObject({ status: 'completed', step: 3 });
    expect(effects).toEqual(['run/step-1', 'run/step-2', 'run/step-3']);
    // Step 2's output is a blob its record refers to: the sweep keeps it.
    clock.advance(1);
    expect(first.runtime.blobs.collect(0)).toBe(0);

    expect(await deleteRun(first.deps, 'run')).toEqual({ outcome: 'deleted', runId: 'run', version: 5, status: 'completed' });
    expect(await first.runtime.store.load('run')).toBeUndefined();
    const count = (table: string) => (first.runtime.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    expect({ runs: count('runs'), checkpoints: count('checkpoints'), steps: count('steps'), ledger: count('ledger'), queue: count('queue') })
      .toEqual({ runs: 0, checkpoints: 0, steps: 0, ledger: 0, queue: 0 });
    // Nothing refers to the blob now: the sweep (stepwise prune) frees it.
    expect(count('blobs')).toBe(1);
    clock.advance(1);
    expect(first.runtime.blobs.collect(0)).toBe(1);
    await expect(deleteRun(first.deps, 'run')).rejects.toBeInstanceOf(UnknownRunError);

    // The same id again: a new run, whose effects run under its keys, not skipped as the old run's results.
    const second = workerProcess({ dbPath: db.path, agent: onceAgent(effects), model: new StubModel(writeRowsScript(3)), clock, workerId: 'B' });
    await start(second.deps, 'write them again');
    await drain(second.deps, second.runtime, clock);
    expect(await loadState(second.runtime)).toMatchObject({ status: 'completed', step: 3, goal: 'write them again' });
    expect(effects).toEqual(['run/step-1', 'run/step-2', 'run/step-3', 'run/step-1', 'run/step-2', 'run/step-3']);
    expect((await second.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
    first.runtime.close();
    second.runtime.close();
  });

  it('a worker that held the deleted run\'s records does not take them for those of a new run of the same id', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const effects: string[] = [];
    const a = workerProcess({ dbPath: db.path, agent: onceAgent(effects), model: new StubModel(writeRowsScript(4)), clock, workerId: 'A' });
    const b = workerProcess({ dbPath: db.path, agent: onceAgent(effects), model: new StubModel(writeRowsScript(4)), clock, workerId: 'B' });
    await start(a.deps);
    // A steps the run twice and holds its records; B finishes it; it is deleted and started anew.
    await advance(a.deps, 'run');
    await advance(a.deps, 'run');
    await drain(b.deps, b.runtime, clock);
    expect(await loadState(b.runtime)).toMatchObject({ status: 'completed', step: 4 });
    await deleteRun(b.deps, 'run');
    // Later, as a run's end and its delete take time: the new run's creation time is its own.
    clock.advance(1);
    await start(b.deps, 'write them again');
    await advance(b.deps, 'run');
    await advance(b.deps, 'run');
    // The new run is at step 2, where A's held records of the old one end.
    const next = await advance(a.deps, 'run');
    // Was: A took its held steps 1-2 of the old run for the new run's, in its prompt and in what it held on.
    expect(next).toMatchObject({ kind: 'advanced' });
    expect((next as { state: { steps: { workerId: string }[] } }).state.steps.map((s) => s.workerId)).toEqual(['B', 'B', 'A']);
    a.runtime.close();
    b.runtime.close();
  });

  it('refuses a running run (cancel it first) and an unknown one, changing nothing', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = workerProcess({ dbPath: db.path, agent: onceAgent([]), model: new StubModel(writeRowsScript(3)), clock, workerId: 'A' });
    await start(w.deps);
    await expect(deleteRun(w.deps, 'run')).rejects.toThrow(RunStateError);
    await expect(deleteRun(w.deps, 'run')).rejects.toThrow(/run run is running: only a run that has ended can be deleted; cancel it first \(stepwise cancel run\)/);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'running' });
    await expect(deleteRun(w.deps, 'nope')).rejects.toThrow('unknown run: nope');
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'completed', step: 3 });
    w.runtime.close();
  });

  it('a retry that makes the failed run running between the delete\'s read and its write wins: the delete is refused', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const effects: string[] = [];
    const w = workerProcess({ dbPath: db.path, agent: onceAgent(effects, 2), model: new StubModel(writeRowsScript(3)), clock, workerId: 'A' });
    await start(w.deps);
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'failed', step: 1 });
    let retried = false;
    // The store as the delete sees it: a retry lands just before its fenced write.
    const racing: CheckpointStore = Object.assign(Object.create(w.runtime.store) as CheckpointStore, {
      deleteRun: async (runId: string, version?: number) => {
        if (!retried && version !== undefined) { retried = true; await retryRun(w.deps, runId, {}); }
        return w.runtime.store.deleteRun(runId, version);
      },
    });
    await expect(deleteRun({ ...w.deps, store: racing }, 'run')).rejects.toThrow(/run run is running: .*cancel it first/);
    expect(retried).toBe(true);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'running', step: 1 });
    expect(effects).toEqual(['run/step-1']);
    // The delete that wins instead: the retry after it finds no run.
    const later = workerProcess({ dbPath: db.path, agent: onceAgent(effects, 2), model: new StubModel(writeRowsScript(3)), clock, workerId: 'B' });
    await drain(later.deps, later.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'failed' });
    expect(await deleteRun(w.deps, 'run')).toMatchObject({ outcome: 'deleted', status: 'failed' });
    await expect(retryRun(w.deps, 'run', {})).rejects.toBeInstanceOf(UnknownRunError);
    w.runtime.close();
    later.runtime.close();
  });

  it('an outbox\'s emails of the run go after the run; a delete cut short between the two is finished by the next', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = workerProcess({ dbPath: db.path, agent: onceAgent([]), model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    await start(w.deps);
    await drain(w.deps, w.runtime, clock);
    const outbox = new OutboxNotifier(join(db.path, '..', 'outbox'));
    const email = (id: string) => ({ id, to: 'ops@example.com', subject: 'Approval needed', text: 'x', html: 'x' });
    for (const id of ['run/wait-a/ops@example.com', 'run/wait-b/ops@example.com', 'run0/wait-c/ops@example.com']) await outbox.send(email(id));
    // Cut short after the run's delete: the emails stay, and the run is gone.
    const cut = { ...w.deps, notifier: { send: outbox.send.bind(outbox), deleteRun: () => Promise.reject(new Error('killed')) } };
    await expect(deleteRun(cut, 'run')).rejects.toThrow('killed');
    expect(await w.runtime.store.load('run')).toBeUndefined();
    expect(readOutbox(outbox.dir)).toHaveLength(3);
    // The next finds no run, deletes its emails, and says an earlier delete was finished; a run whose id
    // begins with this one's keeps its own.
    expect(await deleteRun({ ...w.deps, notifier: outbox }, 'run')).toEqual({ outcome: 'finished', runId: 'run', emails: 2 });
    expect(readOutbox(outbox.dir).map((e) => e.file)).toEqual([outbox.pathOf('run0/wait-c/ops@example.com')]);
    await expect(deleteRun({ ...w.deps, notifier: outbox }, 'run')).rejects.toBeInstanceOf(UnknownRunError);
    w.runtime.close();
  });
});
