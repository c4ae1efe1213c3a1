import { afterEach, describe, expect, it, vi } from 'vitest';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ManualClock, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { META, recordFor, stateAfter } from '../support/states.ts';

/** Every queue row, as the file holds it: what a crash at any moment would leave. */
function queueRows(db: import('../../lib/local/database.ts').Db): { key: string; version: number; acked: boolean }[] {
  return (db.prepare('SELECT dedup_key, version, acked_at FROM queue ORDER BY id').all() as { dedup_key: string; version: number; acked_at: number | null }[])
    .map((r) => ({ key: r.dedup_key, version: r.version, acked: r.acked_at !== null }));
}

/**
 * The local runtime keeps the queue in the checkpoints' file, so a step's checkpoint, the send of its next
 * message and the ack of its delivery are one transaction (one fsync), all or nothing.
 */
describe('local worker path: one transaction per step', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  const worker = (workerId = 'A') => {
    const clock = new ManualClock();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(3)), clock, workerId });
    return { ...w, clock };
  };

  it('a step commits, sends the next message and acks its delivery in the checkpoint\'s transaction', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps);
    const send = vi.spyOn(w.runtime.queue, 'send');
    const ack = vi.spyOn(w.runtime.queue, 'ack');
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const handled = await handleDelivery(w.deps, delivery!);

    expect(handled).toMatchObject({ action: 'ack', acked: true });
    // Neither went through the queue's own connection: the checkpoint's commit did both.
    expect(send).not.toHaveBeenCalled();
    expect(ack).not.toHaveBeenCalled();
    // The run's one row, rewritten from the delivery's message to the next one: that is the ack.
    expect(queueRows(w.runtime.db)).toEqual([{ key: 'run', version: 2, acked: false }]);
    expect((await loadState(w.runtime)).step).toBe(1);
    w.runtime.close();
  });

  it('all or nothing: a queue write that fails inside the transaction leaves no checkpoint, no message, the delivery unacked', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps);
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    // A fault in the middle of the transaction, after the checkpoint's rows and before its queue rows.
    w.runtime.db.exec("CREATE TRIGGER refuse_send BEFORE INSERT ON queue BEGIN SELECT RAISE(ABORT, 'injected: queue write failed'); END");
    await expect(handleDelivery(w.deps, delivery!)).rejects.toThrow(/injected: queue write failed/);
    w.runtime.db.exec('DROP TRIGGER refuse_send');

    expect((await w.runtime.store.load('run'))!.version).toBe(1);
    expect(await w.runtime.store.history('run')).toHaveLength(1);
    expect(queueRows(w.runtime.db)).toEqual([{ key: 'run', version: 1, acked: false }]);
    // The delivery comes back and the step is done then, once.
    w.clock.advance(VISIBILITY_MS + 1);
    const [again] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(again!.receiveCount).toBe(2);
    expect(await handleDelivery(w.deps, again!)).toMatchObject({ action: 'ack', acked: true });
    expect((await w.runtime.store.history('run')).map((h) => h.version)).toEqual([1, 2]);
    w.runtime.close();
  });

  it('a stale commit does none of its queue work: the loser neither sends nor acks', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps);
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await w.runtime.store.commit({ runId: 'run', expectedVersion: 1, state: stateAfter('run', 1), appended: recordFor('run', 1), ...META });
    await expect(w.runtime.store.commit({
      runId: 'run', expectedVersion: 1, state: stateAfter('run', 1), appended: recordFor('run', 1), ...META,
      queue: { send: { message: { runId: 'run', version: 2 } }, ack: delivery!.receipt },
    })).rejects.toBeInstanceOf(StaleVersionError);
    expect(queueRows(w.runtime.db)).toEqual([{ key: 'run', version: 1, acked: false }]);
    w.runtime.close();
  });

  it('a commit carrying a receive takes the oldest visible message for this worker, hidden for the visibility, in its transaction', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps, 'a', 'a');
    await start(w.deps, 'b', 'b');
    const other = openLocalRuntime({ dbPath: db.path, clock: w.clock });
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(JSON.parse(delivery!.body)).toEqual({ runId: 'a', version: 1 });
    w.clock.advance(1); // the step takes time: its message is sent a millisecond after b's
    const written = await w.runtime.store.commit({
      runId: 'a', expectedVersion: 1, state: stateAfter('a', 1), appended: recordFor('a', 1), ...META,
      queue: { send: { message: { runId: 'a', version: 2 } }, ack: delivery!.receipt, receive: w.runtime.queue.receiveInCommit(VISIBILITY_MS) },
    });
    // FIFO as a receive is: b's message is older than the one this commit just sent, so a worker with
    // several runs still takes them in turn.
    expect(written.received).toHaveLength(1);
    const [next] = written.received!;
    expect(JSON.parse(next!.body)).toEqual({ runId: 'b', version: 1 });
    expect(next!.receiveCount).toBe(1);
    expect(next!.receipt).toMatch(/^\d+:[0-9a-f-]{36}$/);
    // Received: another worker gets only a's new message, and b's once its visibility runs out.
    const got = await other.queue.receive({ visibilityMs: VISIBILITY_MS, max: 10 });
    expect(got.map((d) => JSON.parse(d.body))).toEqual([{ runId: 'a', version: 2 }]);
    w.clock.advance(VISIBILITY_MS - 1);
    expect(await other.queue.receive({ visibilityMs: VISIBILITY_MS })).toEqual([]);
    // The receipt is the queue's own: its holder acks it as any delivery.
    expect(await w.runtime.queue.ack(next!)).toBe(true);
    w.clock.advance(VISIBILITY_MS);
    expect(await other.queue.receive({ visibilityMs: VISIBILITY_MS })).toHaveLength(1); // a/v2 again, b is acked
    other.close();
    w.runtime.close();
  });

  it('a delivery made from the commit\'s own message carries it, so the handler parses nothing; one taken from the table carries the body alone', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps, 'a', 'a');
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const receive = w.runtime.queue.receiveInCommit(VISIBILITY_MS);
    const commit = (version: number, queue: import('../../lib/ports.ts').QueueWork) => w.runtime.store.commit({
      runId: 'a', expectedVersion: version, state: stateAfter('a', version), appended: recordFor('a', version), ...META, queue,
    });
    // The delivery's row handed over (send, ack and receive as one read).
    const [handed] = (await commit(1, { send: { message: { runId: 'a', version: 2 } }, ack: delivery!.receipt, receive })).received!;
    expect(handed!.receipt).toBe(delivery!.receipt);
    expect(handed!.message).toEqual({ runId: 'a', version: 2 });
    expect(JSON.parse(handed!.body)).toEqual(handed!.message);
    // Written received (a send and a receive, no delivery to hand over).
    const [written] = (await commit(2, { send: { message: { runId: 'a', version: 3 } }, receive })).received!;
    expect(written!.receipt).not.toBe(delivery!.receipt);
    expect(written!.message).toEqual({ runId: 'a', version: 3 });
    expect(JSON.parse(written!.body)).toEqual(written!.message);
    // Received from the table, as any receive: the body is all there is.
    await start(w.deps, 'b', 'b');
    const [taken] = (await commit(3, { ack: written!.receipt, receive })).received!;
    expect(JSON.parse(taken!.body)).toEqual({ runId: 'b', version: 1 });
    expect(taken!.message).toBeUndefined();
    w.runtime.close();
  });

  it('a commit\'s receive takes only what its consumer would: one run\'s messages, or its agents\'', async () => {
    db = tempDb();
    const w = worker();
    for (const id of ['a', 'b', 'c']) await start(w.deps, id, id);
    const step = async (runId: string, receive: import('../../lib/ports.ts').QueueReceive, ack?: string) => {
      const version = (await w.runtime.store.load(runId))!.version;
      const written = await w.runtime.store.commit({
        runId, expectedVersion: version, state: stateAfter(runId, version), appended: recordFor(runId, version), ...META,
        queue: { ...(ack ? { ack } : {}), receive },
      });
      return written.received ?? [];
    };
    const bodies = (ds: import('../../lib/ports.ts').Delivery[]) => ds.map((d) => JSON.parse(d.body));
    const [a] = await w.runtime.queue.forRun('a').receive({ visibilityMs: VISIBILITY_MS });
    const c = await step('a', w.runtime.queue.forRun('c').receiveInCommit(VISIBILITY_MS), a!.receipt);
    expect(bodies(c)).toEqual([{ runId: 'c', version: 1 }]);
    expect(await step('c', w.runtime.queue.forAgents(['another-agent']).receiveInCommit(VISIBILITY_MS), c[0]!.receipt)).toEqual([]);
    expect(bodies(await step('c', w.runtime.queue.forAgents(['rows-agent']).receiveInCommit(VISIBILITY_MS)))).toEqual([{ runId: 'b', version: 1 }]);
    w.runtime.close();
  });

  it('a commit\'s own next message, with nothing older visible, is written received: hidden, counted once, its receipt the queue\'s (no delivery to hand over)', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps, 'a', 'a');
    const other = openLocalRuntime({ dbPath: db.path, clock: w.clock });
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const written = await w.runtime.store.commit({
      runId: 'a', expectedVersion: 1, state: stateAfter('a', 1), appended: recordFor('a', 1), ...META,
      // No ack: the delivery is not handed over (handOver keeps the row as it is), so the send rewrites it.
      queue: { send: { message: { runId: 'a', version: 2 } }, receive: w.runtime.queue.receiveInCommit(VISIBILITY_MS) },
    });
    const [next] = written.received!;
    expect(next!.receipt).not.toBe(delivery!.receipt);
    expect(JSON.parse(next!.body)).toEqual({ runId: 'a', version: 2 });
    expect(next!.receiveCount).toBe(1);
    // The row as a send and a receive leave it: tagged with the run's agent, hidden for the visibility.
    const row = w.runtime.db.prepare("SELECT id, agent, receive_count, receipt, visible_at - created_at AS hidden FROM queue WHERE dedup_key = 'a' AND version = 2").get();
    expect(row).toEqual({ id: Number(next!.receipt.split(':')[0]), agent: 'rows-agent', receive_count: 1, receipt: next!.receipt.split(':')[1], hidden: VISIBILITY_MS });
    expect(await other.queue.receive({ visibilityMs: VISIBILITY_MS })).toEqual([]);
    w.clock.advance(VISIBILITY_MS);
    const [again] = await other.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(again!.receiveCount).toBe(2); // a worker that died with it: the next receive is a redelivery
    expect(await w.runtime.queue.ack(next!)).toBe(false); // its receipt expired with the visibility
    other.close();
    w.runtime.close();
  });

  it('a send and a receive are written as one only when the receive would take that very message', async () => {
    db = tempDb();
    const w = worker();
    for (const id of ['a', 'b']) await start(w.deps, id, id);
    const { enqueueReceived } = await import('../../lib/local/sqlite-queue.ts');
    const { preparedOnce } = await import('../../lib/local/database.ts');
    const sql = preparedOnce(w.runtime.db);
    const now = w.clock.now();
    const all = w.runtime.queue.receiveInCommit(VISIBILITY_MS);
    const rows = () => (w.runtime.db.prepare('SELECT count(*) AS n FROM queue').get() as { n: number }).n;
    const before = rows();
    // Older messages are visible (a/v1, b/v1): the receive would take one of them.
    expect(enqueueReceived(sql, { message: { runId: 'a', version: 2 } }, all, now)).toBeUndefined();
    for (const d of await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS, max: 10 })) await w.runtime.queue.ack(d);
    // Delayed, several wanted, another run's or another agent's consumer: not that message, or not only it.
    expect(enqueueReceived(sql, { message: { runId: 'a', version: 2 }, delayMs: 1 }, all, now)).toBeUndefined();
    expect(enqueueReceived(sql, { message: { runId: 'a', version: 2 } }, { ...all, max: 2 }, now)).toBeUndefined();
    expect(enqueueReceived(sql, { message: { runId: 'a', version: 2 } }, w.runtime.queue.forRun('b').receiveInCommit(VISIBILITY_MS), now)).toBeUndefined();
    expect(enqueueReceived(sql, { message: { runId: 'a', version: 2 } }, w.runtime.queue.forAgents(['another-agent']).receiveInCommit(VISIBILITY_MS), now)).toBeUndefined();
    // None of those wrote: the caller sends and receives as two.
    expect(rows()).toBe(before);
    expect(queueRows(w.runtime.db)).toEqual([{ key: 'a', version: 1, acked: true }, { key: 'b', version: 1, acked: true }]);
    const [taken] = enqueueReceived(sql, { message: { runId: 'a', version: 2 } }, all, now)!;
    expect(JSON.parse(taken!.body)).toEqual({ runId: 'a', version: 2 });
    // A duplicate send of it is no message of its own and no second receive.
    expect(enqueueReceived(sql, { message: { runId: 'a', version: 2 } }, w.runtime.queue.forRun('a').receiveInCommit(VISIBILITY_MS), now)).toBeUndefined();
    // The run's row, rewritten in place: no row of its own.
    expect(rows()).toBe(before);
    expect(queueRows(w.runtime.db)).toEqual([{ key: 'a', version: 2, acked: false }, { key: 'b', version: 1, acked: true }]);
    w.runtime.close();
  });

  it('a stale commit receives nothing: the message stays visible, its receive count untouched', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps, 'a', 'a');
    await start(w.deps, 'b', 'b');
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await w.runtime.store.commit({ runId: 'a', expectedVersion: 1, state: stateAfter('a', 1), appended: recordFor('a', 1), ...META });
    await expect(w.runtime.store.commit({
      runId: 'a', expectedVersion: 1, state: stateAfter('a', 1), appended: recordFor('a', 1), ...META,
      queue: { ack: delivery!.receipt, receive: w.runtime.queue.receiveInCommit(VISIBILITY_MS) },
    })).rejects.toBeInstanceOf(StaleVersionError);
    const [b] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(JSON.parse(b!.body)).toEqual({ runId: 'b', version: 1 });
    expect(b!.receiveCount).toBe(1);
    w.runtime.close();
  });

  it('a delivery handed back unstarted is visible at once and its receive is not counted; only its holder can hand it back', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps, 'a', 'a');
    const other = openLocalRuntime({ dbPath: db.path, clock: w.clock });
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(await w.runtime.queue.handBack(delivery!)).toBe(true);
    // A second hand-back, or one by a receipt that is no longer the message's, changes nothing.
    expect(await w.runtime.queue.handBack(delivery!)).toBe(false);
    const [again] = await other.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(again!.receiveCount).toBe(1);
    expect(await w.runtime.queue.handBack(delivery!)).toBe(false);
    expect(await other.queue.ack(again!)).toBe(true);
    expect(await other.queue.handBack(again!)).toBe(false); // acked: it stays acked
    expect(other.queue.depth()).toBe(0);
    other.close();
    w.runtime.close();
  });

  it('a large output\'s blob pays no sync of its own: the step\'s checkpoint commit, later in the same WAL, makes it durable', async () => {
    db = tempDb();
    const w = worker();
    // The WAL replays as a prefix, so a checkpoint that survives a power cut brings the blob written before
    // it: the blob's own commit needs no fsync (synchronous=NORMAL, 1), the checkpoint's does (FULL, 2).
    const connection = (store: object) => (store as { db: import('../../lib/local/database.ts').Db }).db;
    expect(connection(w.runtime.blobs).pragma('synchronous', { simple: true })).toBe(1);
    expect(connection(w.runtime.store).pragma('synchronous', { simple: true })).toBe(2);
    w.runtime.close();
  });

  it('a store opened without the queue refuses queue work rather than dropping it', async () => {
    db = tempDb();
    const w = worker();
    await start(w.deps);
    const { SqliteCheckpointStore } = await import('../../lib/local/sqlite-checkpoint-store.ts');
    const alone = new SqliteCheckpointStore(w.runtime.db);
    expect(alone.carriesQueueWork).toBe(false);
    await expect(alone.commit({
      runId: 'run', expectedVersion: 1, state: stateAfter('run', 1), appended: recordFor('run', 1), ...META,
      queue: { send: { message: { runId: 'run', version: 2 } } },
    })).rejects.toThrow(/cannot carry queue work/);
    expect((await w.runtime.store.load('run'))!.version).toBe(1);
    await expect(alone.create(stateAfter('other-run', 0), { ...META, queue: { send: { message: { runId: 'other-run', version: 1 } } } })).rejects.toThrow(/cannot carry queue work/);
    expect(await w.runtime.store.load('other-run')).toBeUndefined();
    w.runtime.close();
  });
});
