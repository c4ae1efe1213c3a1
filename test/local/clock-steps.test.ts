import { afterEach, describe, expect, it } from 'vitest';
import { IdempotencyInProgressError } from '../../lib/core/errors.ts';
import { createLogger } from '../../lib/log.ts';
import { StepWatch } from '../../lib/local/clock-step.ts';
import { META, newState } from '../support/states.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { OneWaitModel, waitAgent } from '../support/wait-agent.ts';

const HOUR_MS = 3_600_000;
const VIS = 30_000;

describe('the local runtime when the clock steps back', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: LocalRuntime[] = [];
  let lines: string[] = [];
  afterEach(() => { for (const r of opened.splice(0)) r.close(); db?.cleanup(); lines = []; });
  const log = createLogger({}, { format: 'json', write: (line) => lines.push(line) });
  const warnings = () => lines.map((l) => JSON.parse(l) as { event?: string; stepMs?: number; rebased?: string }).filter((l) => l.event === 'clock-stepped-back');
  const open = (clock: ManualClock) => {
    const r = openLocalRuntime({ dbPath: db.path, clock, log });
    opened.push(r);
    return r;
  };
  const runOf = (ds: { body: string }[]) => ds.map((d) => (JSON.parse(d.body) as { runId: string }).runId);

  it('queue: a queued message stays visible, a dead worker\'s is back after its visibility, a delayed one after its delay, a live one stays hidden', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const a = open(clock);
    await a.queue.send({ runId: 'dead', version: 1 });
    await a.queue.send({ runId: 'live', version: 1 });
    await a.queue.send({ runId: 'queued', version: 1 });
    await a.queue.send({ runId: 'delayed', version: 1 }, { delayMs: 60_000 });
    // `dead` is taken by a worker that then dies; `live` by one that goes on (its heartbeat renews it).
    const [dead] = await a.queue.receive({ visibilityMs: VIS });
    clock.advance(10_000);
    const [live] = await a.queue.receive({ visibilityMs: VIS });
    expect(runOf([dead!, live!])).toEqual(['dead', 'live']);
    clock.ms -= HOUR_MS;
    const b = open(clock.process());
    const take = async () => {
      const taken = await b.queue.receive({ max: 10, visibilityMs: VIS });
      for (const d of taken) await b.queue.ack(d);
      return runOf(taken);
    };
    // Was: nothing for the hour.
    expect(await take()).toEqual(['queued']);
    expect(warnings()).toEqual([expect.objectContaining({ stepMs: HOUR_MS, rebased: "4 queued messages' delays and visibility timeouts" })]);
    clock.advance(VIS - 1);
    await a.queue.release(live!, VIS);
    expect(await take()).toEqual([]);
    clock.advance(1);
    expect(await take()).toEqual(['dead']);
    expect(await a.queue.ack(live!)).toBe(true);
    clock.advance(60_000 - VIS - 1);
    expect(await take()).toEqual([]);
    clock.advance(1);
    expect(await take()).toEqual(['delayed']);
    clock.advance(VIS - 1);
    expect(await take()).toEqual([]);
    expect(warnings()).toHaveLength(1);
  });

  it('ledger: a dead holder\'s claim blocks its key for a lease from the step, not for the step more', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const holder = clock.process();
    const a = open(holder);
    // The holder dies in its effect: its claim stays, never renewed.
    void a.ledger.once('k', {}, () => new Promise(() => {}), { leaseMs: 60_000 });
    await new Promise((r) => setTimeout(r, 10));
    holder.kill();
    clock.advance(20_000);
    clock.ms -= HOUR_MS;
    const b = open(clock.process());
    const busy = await b.ledger.once('k', {}, async () => 'again').catch((e: unknown) => e);
    // Not taken on the spot: the lease is counted again from now, in full (never shorter than written).
    expect(busy).toBeInstanceOf(IdempotencyInProgressError);
    expect((busy as IdempotencyInProgressError).retryAfterMs).toBe(61_000);
    expect(warnings()).toEqual([expect.objectContaining({ stepMs: HOUR_MS - 20_000, rebased: 'the lease on idempotency key k' })]);
    // Written once: another reader does not count it again, nor warn again.
    clock.advance(59_999);
    await expect(b.ledger.once('k', {}, async () => 'again')).rejects.toBeInstanceOf(IdempotencyInProgressError);
    clock.advance(2);
    expect(await b.ledger.once('k', {}, async () => 'again')).toBe('again');
    expect(warnings()).toHaveLength(1);
  });

  it('a sleeping run\'s timer the step brought before the wait\'s deadline is timed again for the deadline, not dropped, and the run wakes then', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const proc = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), []), model: new OneWaitModel({ kind: 'tool', tool: 'sleep_until', input: { seconds: 3600 } }), clock, workerId: 'A' });
    opened.push(proc.runtime);
    await start(proc.deps);
    await workVisible(proc.deps, proc.runtime);
    const deadline = decodeState((await proc.runtime.store.load('run'))!).wait!.deadline;
    // Ten minutes in, the clock steps back an hour: the wait's deadline (a point on the clock) is 110
    // minutes away, and the rebased timer comes after its hour, 50 minutes before it.
    clock.advance(600_000);
    clock.ms -= HOUR_MS;
    expect(await workVisible(proc.deps, proc.runtime)).toBe(0);
    clock.advance(HOUR_MS);
    expect(await workVisible(proc.deps, proc.runtime)).toBe(1);
    expect((await proc.runtime.store.load('run'))!.status).toBe('waiting');
    // Was: the early timer's send for the same version was taken for a duplicate and its row acked, so the
    // run had no message left and slept for good.
    expect(proc.runtime.queue.depth()).toBe(1);
    clock.ms = deadline - 1;
    expect(await workVisible(proc.deps, proc.runtime)).toBe(0);
    clock.ms = deadline;
    await workVisible(proc.deps, proc.runtime);
    expect(decodeState((await proc.runtime.store.load('run'))!).status).toBe('completed');
  });

  it('a look for a step back that failed (the lock refused, a full disk) is due again at the next poll, not missed for good', () => {
    const watch = new StepWatch();
    const now = Date.now();
    expect(watch.due(now)).toBe(true);
    watch.looked(now);
    expect(watch.due(now)).toBe(false);
    // The clock steps back an hour: due, and due again until a look is made.
    expect(watch.due(now - HOUR_MS)).toBe(true);
    expect(watch.due(now - HOUR_MS)).toBe(true);
    watch.looked(now - HOUR_MS);
    expect(watch.due(now - HOUR_MS)).toBe(false);
  });

  it('the stalled-run sweep finds a running run with no message whose newest checkpoint was written before the step, not the step late', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const r = open(clock);
    // A running run whose message was lost (never sent: the enqueue after its checkpoint failed).
    await r.store.create(newState('lost'), META);
    clock.advance(120_000);
    expect((await r.queue.stalledRuns(clock.now() - 60_000, 10)).map((s) => s.runId)).toEqual(['lost']);
    clock.ms -= HOUR_MS;
    // Was: none until the clock caught up, an hour on.
    expect((await r.queue.stalledRuns(clock.now() - 60_000, 10)).map((s) => s.runId)).toEqual(['lost']);
  });
});

