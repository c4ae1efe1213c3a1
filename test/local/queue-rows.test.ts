import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { OLD_RUNS_TABLE, writeOldFile } from '../support/old-files.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';

type Row = { dedup_key: string; version: number | null; body: string; acked: number; receive_count: number };
const rows = (db: Database.Database) =>
  db.prepare('SELECT dedup_key, version, body, acked_at IS NOT NULL AS acked, receive_count FROM queue ORDER BY id').all() as Row[];

/** The local queue keeps one row per run: its message for the newest version sent. */
describe('the local queue: one row per run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('a send for a newer version rewrites the run\'s row; one for the same or an older version changes nothing', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const { queue } = runtime;
    await queue.send({ runId: 'r', version: 2 });
    await queue.send({ runId: 'r', version: 1 });
    await queue.send({ runId: 'r', version: 2 });
    expect(rows(runtime.db)).toEqual([{ dedup_key: 'r', version: 2, body: '{"runId":"r","version":2}', acked: 0, receive_count: 0 }]);
    await queue.send({ runId: 'r', version: 3 }, { delayMs: 5000 });
    expect(rows(runtime.db)).toMatchObject([{ dedup_key: 'r', version: 3, acked: 0 }]);
    expect(await queue.receive()).toEqual([]); // delayed, as sent
    clock.advance(5000);
    const [got] = await queue.receive();
    expect(JSON.parse(got!.body)).toEqual({ runId: 'r', version: 3 });
    expect(await queue.ack(got!)).toBe(true);
    // Acked, the row is the tombstone of version 3: a late duplicate is swallowed, a newer version is not.
    await queue.send({ runId: 'r', version: 3 });
    expect(queue.depth()).toBe(0);
    await queue.send({ runId: 'r', version: 4 });
    expect(rows(runtime.db)).toMatchObject([{ dedup_key: 'r', version: 4, acked: 0, receive_count: 0 }]);
    runtime.close();
  });

  it('a newer message takes the place of one in flight: its holder (stale by then) can no longer ack, release or hand it back', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const { queue } = runtime;
    await queue.send({ runId: 'r', version: 1 });
    const [held] = await queue.receive({ visibilityMs: 60_000 });
    // Another writer moved the run to version 2 and sent its message (an answer to a wait, a re-drive).
    await queue.send({ runId: 'r', version: 2 });
    expect(await queue.ack(held!)).toBe(false);
    await queue.release(held!, 60_000);
    expect(await queue.handBack(held!)).toBe(false);
    // Version 2's message is visible at once, received for the first time.
    const [next] = await queue.receive();
    expect(JSON.parse(next!.body)).toEqual({ runId: 'r', version: 2 });
    expect(next!.receiveCount).toBe(1);
    runtime.close();
  });

  it('a step\'s commit sends first and acks after: a delivery that is not the run\'s row (a raw copy of its message) is still acked', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const { queue, store } = runtime;
    await store.create(newState('a'), META);
    await queue.send({ runId: 'a', version: 1 });
    const [own] = await queue.receive();
    expect(await queue.ack(own!)).toBe(true);
    // Another system put a copy of the run's message on the queue: a row of its own.
    queue.sendRaw(JSON.stringify({ runId: 'a', version: 1 }));
    const [copy] = await queue.receive();
    expect(copy!.receipt.split(':')[0]).not.toBe(own!.receipt.split(':')[0]);
    await store.commit({
      runId: 'a', expectedVersion: 1, state: stateAfter('a', 1), appended: recordFor('a', 1), ...META,
      queue: { send: { message: { runId: 'a', version: 2 } }, ack: copy!.receipt },
    });
    expect(rows(runtime.db).map(({ dedup_key, version, acked }) => ({ dedup_key, version, acked }))).toEqual([
      { dedup_key: 'a', version: 2, acked: 0 },
      { dedup_key: expect.stringMatching(/^raw\//), version: null, acked: 1 },
    ]);
    runtime.close();
  });

  it('a busy worker\'s step keeps its delivery\'s row for the next version, unwritten, until a third of the lease has gone; received again, the row is at the run\'s newest version', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const { queue, store } = runtime;
    const VISIBILITY = 30_000;
    const receive = queue.receiveInCommit(VISIBILITY);
    await store.create(newState('a'), META);
    await queue.send({ runId: 'a', version: 1 });
    const row = () => runtime.db.prepare("SELECT id, version, visible_at, receive_count, receipt, acked_at FROM queue WHERE dedup_key = 'a'").get() as
      { id: number; version: number; visible_at: number; receive_count: number; receipt: string; acked_at: number | null };
    const step = async (version: number, held: string) => {
      const { received } = await store.commit({
        runId: 'a', expectedVersion: version, state: stateAfter('a', version), appended: recordFor('a', version), ...META,
        queue: { send: { message: { runId: 'a', version: version + 1 } }, ack: held, receive },
      });
      return received![0]!;
    };
    const [first] = await queue.receive({ visibilityMs: VISIBILITY });
    const received = row();
    const leaseEnd = clock.now() + VISIBILITY;
    clock.advance(VISIBILITY / 3); // a third gone: two thirds left, still kept
    const second = await step(1, first!.receipt);
    expect(JSON.parse(second.body)).toEqual({ runId: 'a', version: 2 });
    expect(second.receiveCount).toBe(1);
    // The row is not written: still version 1's, held by the same receipt until the same moment.
    expect(second.receipt).toBe(first!.receipt);
    expect(row()).toEqual(received);
    expect(received).toMatchObject({ version: 1, visible_at: leaseEnd, receive_count: 1 });
    expect(await queue.receive({ visibilityMs: VISIBILITY })).toEqual([]);
    const third = await step(2, second.receipt);
    expect(row()).toEqual(received);
    clock.advance(1); // less than two thirds left: the step's receive writes the row, hidden for the whole visibility again
    const fourth = await step(3, third.receipt);
    expect(row()).toMatchObject({ version: 4, visible_at: clock.now() + VISIBILITY, receive_count: 1, receipt: fourth.receipt.split(':')[1] });
    expect(await queue.ack(third)).toBe(false); // that receipt is gone with the rewrite
    const fifth = await step(4, fourth.receipt);
    const sixth = await step(5, fifth.receipt);
    expect(row()).toMatchObject({ version: 4, receipt: sixth.receipt.split(':')[1] });
    // The holder dies: when the lease ends, the row is delivered again at the run's newest version (6, not the
    // row's 4), as a redelivery: the holder's try of version 6 was the first.
    clock.advance(VISIBILITY);
    const [again] = await queue.receive({ visibilityMs: VISIBILITY });
    expect(JSON.parse(again!.body)).toEqual({ runId: 'a', version: 6 });
    expect(again!.receiveCount).toBe(2);
    expect(row()).toMatchObject({ version: 6, receive_count: 2, receipt: again!.receipt.split(':')[1] });
    expect(await queue.ack(sixth)).toBe(false);
    runtime.close();
  });

  /**
   * A worker holding run a's row, received at version 1, and `step`, which commits a's next version with
   * the hand-over and returns the delivery it received. `others`: more runs, created with no message.
   */
  async function holdingA(others: string[] = []) {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const { queue, store } = runtime;
    const receive = queue.receiveInCommit(30_000);
    for (const runId of ['a', ...others]) await store.create(newState(runId), META);
    await queue.send({ runId: 'a', version: 1 });
    const [first] = await queue.receive({ visibilityMs: 30_000 });
    const step = async (version: number, held: string) => (await store.commit({
      runId: 'a', expectedVersion: version, state: stateAfter('a', version), appended: recordFor('a', version), ...META,
      queue: { send: { message: { runId: 'a', version: version + 1 } }, ack: held, receive },
    })).received![0]!;
    return { clock, runtime, first: first!, step };
  }

  it('a hand-over answered from what the last one read (nothing written since) still yields to a message that has become visible by time alone', async () => {
    const { clock, runtime, first, step } = await holdingA(['b']);
    await runtime.queue.send({ runId: 'b', version: 1 }, { delayMs: 5000 });
    const second = await step(1, first.receipt);
    const third = await step(2, second.receipt);
    expect([second.receipt, third.receipt]).toEqual([first.receipt, first.receipt]);
    clock.advance(5001); // no write: b's message is visible now, and older than a's next
    const taken = await step(3, third.receipt);
    expect(JSON.parse(taken.body)).toEqual({ runId: 'b', version: 1 });
    runtime.close();
  });

  it('past what the last hand-over read ahead (a third of the visibility), the next one reads again: the row stays held, and a message due later is still taken when due', async () => {
    const { clock, runtime, first, step } = await holdingA(['b']);
    const row = () => runtime.db.prepare("SELECT version, visible_at, receipt FROM queue WHERE dedup_key = 'a'").get();
    await runtime.queue.send({ runId: 'b', version: 1 }, { delayMs: 20_000 }); // beyond the first read's 10 s
    const held = row();
    const second = await step(1, first.receipt);
    clock.advance(10_000); // the first read's horizon; two thirds of the lease still left
    const third = await step(2, second.receipt);
    expect(third.receipt).toBe(first.receipt);
    expect(row()).toEqual(held); // handed over again, unwritten
    clock.advance(10_001); // no write: b's message is visible now
    const taken = await step(3, third.receipt);
    expect(JSON.parse(taken.body)).toEqual({ runId: 'b', version: 1 });
    runtime.close();
  });

  it('a message another connection sends between two hand-overs is seen: the next step takes it, the older one', async () => {
    const { clock, runtime, first, step } = await holdingA(['b']);
    const second = await step(1, first.receipt);
    const third = await step(2, second.receipt);
    expect(third.receipt).toBe(first.receipt);
    // Another process's connection, as the HTTP API that starts a run has.
    const other = new Database(db.path);
    other.prepare("INSERT INTO queue (dedup_key, run_id, agent, version, body, visible_at, created_at) VALUES ('b', 'b', 'test-agent', 1, ?, ?, ?)")
      .run(JSON.stringify({ runId: 'b', version: 1 }), clock.now(), clock.now());
    other.close();
    clock.advance(1);
    const taken = await step(3, third.receipt);
    expect(JSON.parse(taken.body)).toEqual({ runId: 'b', version: 1 });
    runtime.close();
  });

  /** A run at version 4, its row kept by a worker's hand-overs since version 1 (unwritten: the row says 1). */
  async function handedOver() {
    const { clock, runtime, first, step } = await holdingA();
    let delivery = first;
    for (let version = 1; version < 4; version++) delivery = await step(version, delivery.receipt);
    const row = () => runtime.db.prepare("SELECT version, body, receive_count, receipt IS NOT NULL AS held, visible_at, acked_at FROM queue WHERE dedup_key = 'a'").get() as
      { version: number; body: string; receive_count: number; held: number; visible_at: number; acked_at: number | null };
    expect(row()).toMatchObject({ version: 1, held: 1 });
    expect(JSON.parse(delivery.body)).toEqual({ runId: 'a', version: 4 });
    return { clock, runtime, delivery, row };
  }

  it('a row kept by another worker\'s hand-overs is the run\'s live message, whatever version it says: a re-drive or the sweep leaves it to its holder', async () => {
    const { clock, runtime, row } = await handedOver();
    const before = row();
    expect(await runtime.queue.redrive({ runId: 'a', version: 4 })).toBe(false);
    // A stalled run is one with no checkpoint for a while and no live message: this one has its holder's.
    clock.advance(10 * 60_000);
    expect(await runtime.queue.stalledRuns(clock.now(), 10)).toEqual([]);
    expect(row()).toEqual(before);
    // Its holder gone, the row is visible again: still live (whoever receives it gets version 4).
    clock.advance(30_000);
    expect(await runtime.queue.redrive({ runId: 'a', version: 4 })).toBe(false);
    const [again] = await runtime.queue.receive();
    expect(JSON.parse(again!.body)).toEqual({ runId: 'a', version: 4 });
    expect(again!.receiveCount).toBe(2);
    runtime.close();
  });

  it('the caller\'s own row is not the live message: its re-drive brings the row to the newest version, so the ack after it leaves the run moved', async () => {
    const { runtime, delivery, row } = await handedOver();
    // A handler that found the run moved on (a stale write) re-drives, then acks the delivery it holds.
    expect(await runtime.queue.redrive({ runId: 'a', version: 4 }, { held: delivery.receipt })).toBe(true);
    expect(await runtime.queue.ack(delivery)).toBe(false);
    expect(row()).toMatchObject({ version: 4, receive_count: 0, held: 0, acked_at: null });
    const [next] = await runtime.queue.receive();
    expect(JSON.parse(next!.body)).toEqual({ runId: 'a', version: 4 });
    expect(next!.receiveCount).toBe(1);
    // Acked by its holder, the row is no live message either.
    expect(await runtime.queue.ack(next!)).toBe(true);
    expect(await runtime.queue.redrive({ runId: 'a', version: 4 })).toBe(true);
    runtime.close();
  });

  it('a handed-over delivery handed back becomes its version\'s message, never received; released, it comes back as a redelivery', async () => {
    const { runtime, delivery, row } = await handedOver();
    expect(await runtime.queue.handBack(delivery)).toBe(true);
    expect(row()).toMatchObject({ version: 4, body: '{"runId":"a","version":4}', receive_count: 0, held: 0 });
    const [taken] = await runtime.queue.receive();
    expect(JSON.parse(taken!.body)).toEqual({ runId: 'a', version: 4 });
    expect(taken!.receiveCount).toBe(1);
    runtime.close();

    const second = await handedOver();
    // Released (a step that failed, a key refused): back after the delay, at version 4, counted again.
    await second.runtime.queue.release(second.delivery, 1000);
    expect(await second.runtime.queue.receive()).toEqual([]);
    second.clock.advance(1000);
    const [back] = await second.runtime.queue.receive();
    expect(JSON.parse(back!.body)).toEqual({ runId: 'a', version: 4 });
    expect(back!.receiveCount).toBe(2);
    second.runtime.close();
  });

  it('a row sent and never received before the run moved on is received at the newest version as its first receive; a row of no run is left as it is', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    const { queue, store } = runtime;
    await store.create(newState('a'), META);
    await queue.send({ runId: 'a', version: 1 });
    // Another writer moves the run on without a send (as an operator's command may).
    await store.commit({ runId: 'a', expectedVersion: 1, state: stateAfter('a', 1), appended: recordFor('a', 1), ...META });
    const [got] = await queue.receive();
    expect(JSON.parse(got!.body)).toEqual({ runId: 'a', version: 2 });
    expect(got!.receiveCount).toBe(1);
    await queue.ack(got!);
    runtime.queue.sendRaw('{"runId":"nobody","version":1}');
    runtime.queue.sendRaw('not json');
    const raw = await queue.receive({ max: 10 });
    expect(raw.map((d) => [d.body, d.receiveCount])).toEqual([['{"runId":"nobody","version":1}', 1], ['not json', 1]]);
    runtime.close();
  });

  it('a re-drive brings the run\'s row back: at the same version its receive count is kept (a redelivery), at a newer one it starts again; its agent is the run\'s', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    runtime.db.prepare("INSERT INTO runs (run_id, version, status, step, agent, created_at, updated_at) VALUES ('r', 2, 'running', 1, 'rows', 0, 0)").run();
    const rows = runtime.queue.forAgents(['rows']);
    await runtime.queue.send({ runId: 'r', version: 2 });
    const [first] = await rows.receive();
    expect(await rows.ack(first!)).toBe(true);
    expect(await runtime.queue.redrive({ runId: 'r', version: 2 })).toBe(true);
    const [again] = await rows.receive();
    expect(again!.receiveCount).toBe(2);
    expect(await rows.ack(again!)).toBe(true);
    expect(await runtime.queue.redrive({ runId: 'r', version: 3 })).toBe(true);
    const [newer] = await rows.receive();
    expect(JSON.parse(newer!.body)).toEqual({ runId: 'r', version: 3 });
    expect(newer!.receiveCount).toBe(1);
    // A run with no row yet: the re-drive's row is tagged with the run's agent, for that agent's workers only.
    runtime.db.prepare("INSERT INTO runs (run_id, version, status, step, agent, created_at, updated_at) VALUES ('s', 1, 'running', 0, 'rows', 0, 0)").run();
    expect(await runtime.queue.redrive({ runId: 's', version: 1 })).toBe(true);
    expect(await runtime.queue.forAgents(['another-agent']).receive()).toEqual([]);
    expect((await rows.receive()).map((d) => JSON.parse(d.body))).toEqual([{ runId: 's', version: 1 }]);
    runtime.close();
  });

  it('a file from before has its rows per version folded into one per run when opened, keeping the live message of the newest version', async () => {
    db = tempDb();
    // The queue as the previous release wrote it: a row per (run, version), tombstones kept for a day.
    writeOldFile(db.path, `${OLD_RUNS_TABLE}
      CREATE TABLE queue (id INTEGER PRIMARY KEY, dedup_key TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, agent TEXT, body TEXT NOT NULL,
        visible_at INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0, receipt TEXT, acked_at INTEGER, created_at INTEGER NOT NULL);
      INSERT INTO runs VALUES ('a', 4, 'running', 3, 'rows', NULL, 1, 1), ('b', 2, 'waiting', 1, 'rows', NULL, 1, 1), ('c', 5, 'running', 4, 'rows', NULL, 1, 1);
      INSERT INTO queue (dedup_key, run_id, agent, body, visible_at, receive_count, acked_at, created_at) VALUES
        ('a/v3', 'a', 'rows', '{"runId":"a","version":3}', 0, 1, 10, 0),
        ('a/v4', 'a', 'rows', '{"runId":"a","version":4}', 0, 2, NULL, 0),
        ('b/v1', 'b', 'rows', '{"runId":"b","version":1}', 0, 1, 10, 0),
        ('b/v2', 'b', 'rows', '{"runId":"b","version":2}', 0, 1, 12, 0),
        ('c/v5', 'c', 'rows', '{"runId":"c","version":5}', 0, 0, NULL, 0),
        ('c/v3', 'c', 'rows', '{"runId":"c","version":3}', 99999, 0, NULL, 0),
        ('raw/1', '', NULL, 'not json', 0, 0, NULL, 0);
    `);

    const clock = new ManualClock();
    const first = openLocalRuntime({ dbPath: db.path, clock });
    const second = openLocalRuntime({ dbPath: db.path, clock }); // another process opening the same file
    try {
      expect(rows(first.db).map(({ dedup_key, version, acked, receive_count }) => ({ dedup_key, version, acked, receive_count }))).toEqual([
        { dedup_key: 'a', version: 4, acked: 0, receive_count: 2 }, // the live one, its receive count kept
        { dedup_key: 'b', version: 2, acked: 1, receive_count: 1 }, // the newest tombstone
        { dedup_key: 'c', version: 5, acked: 0, receive_count: 0 }, // c/v3, live but stale, dropped
        { dedup_key: 'raw/1', version: null, acked: 0, receive_count: 0 },
      ]);
      // Still deduplicated and deliverable as before.
      await second.queue.send({ runId: 'b', version: 2 });
      expect(first.queue.depth()).toBe(3);
      const taken = await second.queue.receive({ max: 10 });
      expect(taken.map((d) => d.body).sort()).toEqual(['not json', '{"runId":"a","version":4}', '{"runId":"c","version":5}']);
      expect(taken.find((d) => d.body.includes('"a"'))!.receiveCount).toBe(3);
    } finally {
      first.close();
      second.close();
    }
  });
});
