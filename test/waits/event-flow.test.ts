import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { createLogger } from '../../lib/log.ts';
import { resolveWait } from '../../lib/core/waits.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { SqliteEventBuffer } from '../../lib/local/sqlite-event-buffer.ts';
import type { AgentDefinition } from '../../lib/agent.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { driveWait } from '../../lib/waits/drive.ts';
import { emitEvent, eventAnswer, readWaitEvent, waitEventOf } from '../../lib/waits/events.ts';
import { runIdForEvent, startFromEvent } from '../../lib/engine/start-from-event.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { OneWaitModel, waitAgent } from '../support/wait-agent.ts';

let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

const waitFor = (key: string, timeoutSeconds = 300): ModelReply => ({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds } });

function worker(clock: ManualClock, workerId: string, first: ModelReply, settings?: AgentDefinition['settings']) {
  const model = new OneWaitModel(first);
  const proc = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), [], settings), model, clock, workerId });
  const events = new SqliteEventBuffer(proc.runtime.db, { clock });
  const deps: EngineDeps = { ...proc.deps, waits: { events } };
  const emit = (key: string, id: string, payload: unknown = { amount: 12 }) =>
    emitEvent({ ...deps, events, waitingFor: (t, k) => proc.runtime.store.waitingFor(t, k) }, { type: 'order.paid', key, id, payload });
  return { deps, runtime: proc.runtime, model, emit };
}

describe('a run that waits for an event (SQLite)', () => {
  it('a waiting run whose head cannot be read: its delivery fails it with the reason and keeps the head; no throw', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', waitFor('order-5'));
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    const waiting = (await w.runtime.store.load('run'))!;
    expect(waiting.status).toBe('waiting');
    // Found so by a fuzzer: the head's first character replaced, so its text is no JSON.
    const head = ` ${waiting.head.slice(1)}`;
    w.runtime.db.prepare('UPDATE checkpoints SET head = ? WHERE run_id = ? AND version = ?').run(head, 'run', waiting.version);
    const lines: string[] = [];
    w.deps.log = createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } });
    const handled = await handleDelivery(w.deps, { body: JSON.stringify({ runId: 'run', version: waiting.version }), receiveCount: 1 });
    expect(handled.action).toBe('ack');
    // Its line names the run's completed steps (from the store's columns: the head cannot say) and the bytes.
    const failed = lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'waiting run failed: unreadable checkpoint');
    expect(failed).toEqual([expect.objectContaining({ event: 'checkpoint', runId: 'run', step: 0, version: waiting.version + 1, bytes: 0, status: 'failed' })]);
    const after = (await w.runtime.store.load('run'))!;
    expect(after).toMatchObject({ status: 'failed', version: waiting.version + 1 });
    expect(after.reason).toMatch(/unreadable: head is not valid JSON/);
    const kept = w.runtime.db.prepare('SELECT head FROM checkpoints WHERE run_id = ? AND version = ?').get('run', waiting.version) as { head: string };
    expect(kept.head).toBe(head);
    w.runtime.close();
  });

  it('a waiting run whose head cannot be read, answered before its failure is written: the answer stands, no throw', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', waitFor('order-6'));
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    const waiting = (await w.runtime.store.load('run'))!;
    expect(waiting.status).toBe('waiting');
    // The answer another process resumes the run with: computed from the head while it was readable.
    const answered = resolveWait(decodeState(waiting), eventAnswer({ type: 'order.paid', key: 'order-6', id: 'evt-6', payload: { amount: 6 }, receivedAt: clock.now() }), clock.now(), 'worker-B');
    w.runtime.db.prepare('UPDATE checkpoints SET head = ? WHERE run_id = ? AND version = ?').run(` ${waiting.head.slice(1)}`, 'run', waiting.version);
    // The race: the answer commits the next version just before the failure is written on the waiting one.
    const store = w.runtime.store;
    const markUnreadable = store.markUnreadable.bind(store);
    const failures: unknown[] = [];
    let raced = false;
    store.markUnreadable = async (...args) => {
      if (!raced) {
        raced = true;
        await store.commit({ runId: 'run', expectedVersion: waiting.version, state: answered.state, appended: answered.record, workerId: 'worker-B', codeVersion: 'test' });
      }
      return markUnreadable(...args).catch((error: unknown) => { failures.push(error); throw error; });
    };
    expect(await driveWait(w.deps, 'run')).toEqual({ links: [] });
    // The stale write was tried and refused by the fence; driveWait swallowed only that.
    expect(failures).toHaveLength(1);
    expect(failures[0]).toBeInstanceOf(StaleVersionError);
    // The answer's version is the latest: running with the event as the step's result, not failed.
    const after = (await w.runtime.store.load('run'))!;
    expect(after).toMatchObject({ status: 'running', version: waiting.version + 1 });
    expect(after.reason).toBeUndefined();
    expect(decodeState(after).steps[0]).toMatchObject({ waitId: answered.record.waitId, workerId: 'worker-B' });
    expect((await w.runtime.store.history('run')).map((c) => c.status)).not.toContain('failed');
    w.runtime.close();
  });

  it('a matching event resumes it with the event as the result; another key does not', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', waitFor('order-7'));
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    expect(decodeState((await w.runtime.store.load('run'))!)).toMatchObject({ status: 'waiting', wait: { kind: 'event', event: { type: 'order.paid', key: 'order-7' } } });

    const other = await w.emit('order-8', 'evt-1');
    expect(other.resumed).toEqual([]);
    expect((await w.runtime.store.load('run'))!.status).toBe('waiting');

    const match = await w.emit('order-7', 'evt-2', { amount: 12, note: '<script>x</script>' });
    expect(match.resumed).toMatchObject([{ outcome: 'resumed', runId: 'run' }]);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    expect(done.status).toBe('completed');
    expect(done.steps[0]!.result.text).toContain('"id":"evt-2"');
    expect(done.summary).toContain('"amount":12');

    // The same event delivered again (EventBridge is at-least-once) resumes nothing twice.
    const again = await w.emit('order-7', 'evt-2');
    expect(again.fresh).toBe(false);
    expect(again.resumed).toEqual([]);
    w.runtime.close();
  });

  it('an event\'s answer is kept inline up to the agent\'s inlineLimit, though the process it arrives at holds no agent', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const payload = { rows: 'x'.repeat(8000) };
    // The agent keeps 16 KB inline; the emit below (like the CLI's or another agent's handler) knows none of it.
    const roomy = worker(clock, 'worker-A', waitFor('order-9'), { inlineLimit: 16_384 });
    await start(roomy.deps);
    await workVisible(roomy.deps, roomy.runtime);
    expect(decodeState((await roomy.runtime.store.load('run'))!).wait).toMatchObject({ inlineLimit: 16_384 });
    expect((await roomy.emit('order-9', 'evt-9', payload)).resumed).toMatchObject([{ outcome: 'resumed' }]);
    const kept = decodeState((await roomy.runtime.store.load('run'))!).steps[0]!.result;
    expect(kept.ref).toBeUndefined();
    expect(kept.text).toContain(payload.rows);
    roomy.runtime.close();
    db.cleanup();

    // An agent that set none: the same answer goes to the blob store at the default 4 KB, its excerpt inline.
    db = tempDb();
    const plain = worker(clock, 'worker-A', waitFor('order-9'));
    await start(plain.deps);
    await workVisible(plain.deps, plain.runtime);
    expect(decodeState((await plain.runtime.store.load('run'))!).wait!.inlineLimit).toBeUndefined();
    await plain.emit('order-9', 'evt-9', payload);
    const stored = decodeState((await plain.runtime.store.load('run'))!).steps[0]!.result;
    expect(stored.ref).toBeDefined();
    expect(stored.text.length).toBeLessThan(payload.rows.length);
    plain.runtime.close();
  });

  it('an event that arrives before its wait begins is matched when the wait begins', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', waitFor('order-9'));
    await start(w.deps);
    const early = await w.emit('order-9', 'evt-early', { paid: true });
    expect(early).toMatchObject({ fresh: true, resumed: [] });
    clock.advance(5_000);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    expect(done).toMatchObject({ status: 'completed', step: 1 });
    expect(done.steps[0]!.result.text).toContain('"id":"evt-early"');
    w.runtime.close();
  });

  it('with no event, the deadline resumes the run with "timed out"', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', waitFor('order-10', 60));
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    clock.advance(59_000);
    expect(await workVisible(w.deps, w.runtime)).toBe(0);
    clock.advance(1_000);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    expect(done.status).toBe('completed');
    expect(done.steps[0]!.result).toMatchObject({ ok: false });
    expect(done.steps[0]!.result.text).toContain('"timedOut":true');
    // An event after the deadline finds no one waiting.
    expect((await w.emit('order-10', 'evt-late')).resumed).toEqual([]);
    w.runtime.close();
  });

  it('sleep_until wakes the run at its time, not before', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', { kind: 'tool', tool: 'sleep_until', input: { seconds: 3600 } });
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    expect((await w.runtime.store.load('run'))!.status).toBe('waiting');
    clock.advance(3_599_999);
    expect(await workVisible(w.deps, w.runtime)).toBe(0);
    clock.advance(1);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    expect(done.status).toBe('completed');
    expect(done.steps[0]!.result).toMatchObject({ ok: true });
    expect(done.steps[0]!.result.text).toContain('"woke":true');
    w.runtime.close();
  });

  it('a wait the agent does not allow is an answer for the model, not a failure', async () => {
    db = tempDb();
    const clock = new ManualClock();
    // The agent allows sleeps of at most a day.
    const w = worker(clock, 'worker-A', { kind: 'tool', tool: 'sleep_until', input: { until: new Date(clock.now() + 3 * 86_400_000).toISOString() } });
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    expect(done).toMatchObject({ status: 'completed', failures: 0 });
    expect(done.steps[0]!.result).toMatchObject({ ok: false, text: expect.stringContaining('cannot wait') });
    w.runtime.close();
  });

  it('a sleep past the agent\'s longest by an hour tells the model the longest and the latest time it may ask for', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const until = new Date(clock.now() + 25 * 3_600_000).toISOString();
    const w = worker(clock, 'worker-A', { kind: 'tool', tool: 'sleep_until', input: { until } });
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    // In whole days it read "sleep_until is 1 days away; the longest is 1 days".
    expect(done.steps[0]!.result.text).toContain(
      `cannot wait: sleep_until ${until} is 90000 s ahead; the longest sleep is 86400 s, to ${new Date(clock.now() + 86_400_000).toISOString()} at the latest`,
    );
    w.runtime.close();
  });

  it('a sleep until a time with no time zone tells the model the zone is what is missing', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', { kind: 'tool', tool: 'sleep_until', input: { until: '2030-01-01T09:00:00' } });
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    const done = decodeState((await w.runtime.store.load('run'))!);
    expect(done.steps[0]!.result.text).toContain('until: must be an ISO 8601 date and time with a time zone (Z or +hh:mm), such as 2030-01-01T09:00:00Z');
    w.runtime.close();
  });
});

describe('one event that many runs wait for', () => {
  it('answers them several at a time, each once: one by one, hundreds outlasted the events function\'s minute on AWS', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'worker-A', waitFor('order-fan'));
    const runIds = Array.from({ length: 40 }, (_, i) => `fan-${i}`);
    for (const runId of runIds) await start(w.deps, 'write the rows', runId);
    await workVisible(w.deps, w.runtime, 1000);
    // Each answer's read takes a network round trip, as DynamoDB's does: counted while in flight.
    const store = w.runtime.store;
    let inFlight = 0;
    let most = 0;
    const slowStore = Object.assign(Object.create(store) as typeof store, {
      load: async (...args: Parameters<typeof store.load>) => {
        most = Math.max(most, ++inFlight);
        await new Promise((resolve) => setTimeout(resolve, 5));
        inFlight--;
        return store.load(...args);
      },
    });
    const emitted = await emitEvent({ ...w.deps, store: slowStore, events: w.deps.waits!.events!, waitingFor: (t, k) => store.waitingFor(t, k) },
      { type: 'order.paid', key: 'order-fan', id: 'evt-fan', payload: { amount: 3 } });
    expect(most).toBeGreaterThan(1);
    expect(emitted.resumed.map((r) => [r.runId, r.outcome]).sort()).toEqual(runIds.map((runId) => [runId, 'resumed']).sort());
    await workVisible(w.deps, w.runtime, 1000);
    for (const runId of runIds) {
      const done = decodeState((await store.load(runId))!);
      expect(done.status).toBe('completed');
      expect(done.steps.filter((step) => step.result.text.includes('evt-fan'))).toHaveLength(1);
    }
    w.runtime.close();
  });
});

describe('runs started by events', () => {
  it('an event that matches a trigger starts one run, however often it is delivered', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = worker(clock, 'events-fn', { kind: 'done', summary: 'nothing to do' });
    const triggers = [
      { source: 'aws.s3', detailType: 'Object Created', goal: (e: { detail: unknown }) => `Process s3://${(e.detail as { bucket: { name: string }; object: { key: string } }).bucket.name}/${(e.detail as { object: { key: string } }).object.key}` },
      { source: 'aws.s3', detailType: 'Object Deleted', goal: () => 'never for a create' },
      { source: 'app', goal: () => undefined },
    ];
    const event = { id: 'e-123', source: 'aws.s3', detailType: 'Object Created', detail: { bucket: { name: 'inbox' }, object: { key: 'a<b>.csv' } } };
    const first = await startFromEvent(w.deps, triggers, event);
    const again = await startFromEvent(w.deps, triggers, event);
    expect(first).toMatchObject([{ created: true }]);
    expect(again).toMatchObject([{ created: false, runId: first[0]!.runId }]);
    expect(first[0]!.runId).toBe(runIdForEvent(w.deps.agent.name, event, 0));
    const runs = await w.runtime.store.list();
    expect(runs.map((r) => r.runId)).toEqual([first[0]!.runId]);
    expect(decodeState((await w.runtime.store.load(first[0]!.runId))!).goal).toBe('Process s3://inbox/a<b>.csv');
    expect(await startFromEvent(w.deps, triggers, { ...event, id: 'e-124', detailType: 'Object Restored' })).toEqual([]);
    w.runtime.close();
  });

  it('an incoming event names the waits it resumes by detail-type and detail.key, or as the agent says', () => {
    const event = { id: 'e-1', source: 'shop', detailType: 'order.paid', detail: { key: 'order-7', amount: 3 } };
    expect(waitEventOf({}, event)).toEqual({ type: 'order.paid', key: 'order-7', id: 'e-1', payload: event.detail });
    expect(waitEventOf({}, { ...event, detail: { orderId: 'x' } })).toBeUndefined();
    expect(waitEventOf({ eventKey: (e) => ({ type: `${e.source}.paid`, key: String((e.detail as { orderId: string }).orderId) }) }, { ...event, detail: { orderId: 'o-9' } }))
      .toMatchObject({ type: 'shop.paid', key: 'o-9' });
    expect(waitEventOf({}, { ...event, detail: { key: 'has space' } })).toBeUndefined();
  });

  it('an event that names no wait says why: a key sent as a number, a detail-type with spaces (AWS\'s own), each with what to do', () => {
    const event = { id: 'e-1', source: 'shop', detailType: 'order.paid', detail: { key: 12345 } };
    expect(readWaitEvent({}, event)).toEqual({ unmatched: 'its detail.key is a number (12345), not text: send it as a string; the agent\'s eventKey can name the wait it resumes' });
    expect(readWaitEvent({}, { ...event, detail: { correlationKey: ['o', 7] } })).toEqual({ unmatched: 'its detail.correlationKey is a list (["o",7]), not text: send it as a string; the agent\'s eventKey can name the wait it resumes' });
    // A string key wins over the other field's number; an empty one is no key.
    expect(readWaitEvent({}, { ...event, detail: { key: 5, correlationKey: 'o-5' } })).toMatchObject({ key: 'o-5' });
    expect(readWaitEvent({}, { ...event, detail: { key: '' } })).toEqual({ unmatched: 'it has no key (detail.key or detail.correlationKey)' });
    expect(readWaitEvent({}, { ...event, source: 'aws.s3', detailType: 'Object Created', detail: { object: { key: 'a.csv' } } }))
      .toEqual({ unmatched: 'its type "Object Created" is not 1-256 letters, digits or ._:/@+-; the agent\'s eventKey can name the wait it resumes' });
    // An agent with an eventKey is not told to write one.
    expect(readWaitEvent({ eventKey: () => undefined }, { ...event, detailType: 'Object Created' })).toEqual({ unmatched: 'its type "Object Created" is not 1-256 letters, digits or ._:/@+-' });
  });

  it('an agent\'s eventKey that returns no strings is refused with what it returned; one that throws, throws for the handler to log', () => {
    const event = { id: 'e-1', source: 'shop', detailType: 'order.paid', detail: { orderId: 7 } };
    const returning = (value: unknown) => ({ eventKey: () => value as { type: string; key: string } });
    expect(() => waitEventOf(returning({ type: 'order.paid', key: 7 }), event)).toThrow(/eventKey must return \{ type, key \} as strings.*"key":7/);
    expect(() => waitEventOf(returning('order-7'), event)).toThrow(/eventKey must return/);
    expect(() => waitEventOf({ eventKey: (e) => ({ type: 't', key: (e.detail as { order: { id: string } }).order.id }) }, event)).toThrow(TypeError);
    // Leaving a part out still means the default for it; undefined means no custom name at all.
    expect(waitEventOf(returning({ key: 'o-7' }), event)).toMatchObject({ type: 'order.paid', key: 'o-7' });
    expect(waitEventOf(returning(undefined), { ...event, detail: { key: 'k' } })).toMatchObject({ type: 'order.paid', key: 'k' });
    expect(waitEventOf({}, { ...event, detailType: undefined as unknown as string, detail: { key: 'k' } })).toBeUndefined();
  });
});
