import { execFileSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { machineTime } from '../../lib/machine-time.ts';
import { EffectStillRunningError, IdempotencyInProgressError, PermanentError } from '../../lib/core/errors.ts';
import { recordFailure } from '../../lib/core/transitions.ts';
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

describe('the local runtime when the clock steps forward', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: LocalRuntime[] = [];
  afterEach(() => { for (const r of opened.splice(0)) r.close(); db?.cleanup(); });
  const open = (clock: ManualClock) => {
    const r = openLocalRuntime({ dbPath: db.path, clock });
    opened.push(r);
    return r;
  };
  const LEASE = 60_000;

  it('ledger: a live holder keeps its key when the wall clock steps past its lease; a second attempt is told to come back when the lease ends on the machine\'s clock, and the effect runs once', async () => {
    db = tempDb();
    const clock = new ManualClock().onMachine();
    const a = open(clock.process());
    const b = open(clock.process());
    let applied = 0;
    let finish!: (value: string) => void;
    const holding = a.ledger.once('k', {}, () => { applied++; return new Promise<string>((resolve) => { finish = resolve; }); }, { leaseMs: LEASE });
    await new Promise((r) => setTimeout(r, 10));
    await clock.pass(10_000);
    // NTP or `date -s` steps the wall clock two hours on; the holder is still inside its effect.
    clock.ms += 2 * HOUR_MS;
    const busy = await b.ledger.once('k', {}, () => { applied++; return 'beside it'; }, { leaseMs: LEASE }).catch((e: unknown) => e);
    // Was: the key was free by the wall clock, and the effect ran a second time beside the first.
    expect(busy).toBeInstanceOf(IdempotencyInProgressError);
    expect((busy as IdempotencyInProgressError).retryAfterMs).toBe(LEASE - 10_000 + 1_000);
    expect(applied).toBe(1);
    // The holder renews on (every third of the lease), past what its first lease was.
    await clock.pass(LEASE);
    await expect(b.ledger.once('k', {}, () => { applied++; return 'beside it'; }, { leaseMs: LEASE })).rejects.toBeInstanceOf(IdempotencyInProgressError);
    finish('once');
    expect(await holding).toBe('once');
    expect(await b.ledger.once('k', {}, () => { applied++; return 'beside it'; }, { leaseMs: LEASE })).toBe('once');
    expect(applied).toBe(1);
  });

  it('ledger: a dead holder\'s key is free a lease after its last renewal on the machine\'s clock, whichever way the wall clock stepped meanwhile', async () => {
    db = tempDb();
    for (const step of [2 * HOUR_MS, -2 * HOUR_MS]) {
      const clock = new ManualClock().onMachine();
      const holder = clock.process();
      const a = open(holder);
      const key = `k${step}`;
      void a.ledger.once(key, {}, () => new Promise(() => {}), { leaseMs: LEASE });
      await new Promise((r) => setTimeout(r, 10));
      await clock.pass(LEASE / 3);
      holder.kill();
      clock.ms += step;
      const b = open(clock.process());
      await expect(b.ledger.once(key, {}, async () => 'again')).rejects.toBeInstanceOf(IdempotencyInProgressError);
      clock.advance(LEASE - 1);
      await expect(b.ledger.once(key, {}, async () => 'again')).rejects.toBeInstanceOf(IdempotencyInProgressError);
      clock.advance(1);
      expect(await b.ledger.once(key, {}, async () => 'again')).toBe('again');
    }
  });

  it('delete: an effect of the run that still runs holds its delete whichever way the wall clock steps; a dead holder\'s claim a lease after its last renewal on the machine\'s clock does not', async () => {
    db = tempDb();
    for (const step of [2 * HOUR_MS, -2 * HOUR_MS]) {
      const clock = new ManualClock().onMachine();
      const holder = clock.process();
      const a = open(holder);
      const b = open(clock.process());
      const runId = `run${step}`;
      await b.store.create(newState(runId), META);
      void a.ledger.once(`${runId}/step-1`, {}, () => new Promise(() => {}), { leaseMs: LEASE });
      await new Promise((r) => setTimeout(r, 10));
      await clock.pass(LEASE / 3);
      // The run failed while its effect went on; then NTP or `date -s` steps the wall clock.
      const { version } = await b.store.commit({ runId, expectedVersion: 1, state: recordFailure(newState(runId), new PermanentError('boom'), 9_000), ...META });
      clock.ms += step;
      const refused = await b.store.deleteRun(runId, version).catch((e: unknown) => e);
      // Was (forward): the claim's wall lease had run out, the delete went, and a new run of the id could apply the effect beside it.
      expect(refused, String(step)).toBeInstanceOf(EffectStillRunningError);
      expect((refused as EffectStillRunningError).retryAfterMs).toBe(LEASE + 1_000);
      holder.kill();
      clock.advance(LEASE - 1);
      await expect(b.store.deleteRun(runId, version)).rejects.toBeInstanceOf(EffectStillRunningError);
      clock.advance(1);
      expect(await b.store.deleteRun(runId, version)).toBe(true);
    }
  });

  it('ledger: a claim written on another boot, or by a clock without the machine\'s time, is read by the wall clock', async () => {
    db = tempDb();
    // Another boot: the machine was restarted (its holder died with it) and its monotonic clock began again.
    const clock = new ManualClock().onMachine('boot-1', 5_000_000);
    const holder = clock.process();
    const a = open(holder);
    void a.ledger.once('rebooted', {}, () => new Promise(() => {}), { leaseMs: LEASE });
    await new Promise((r) => setTimeout(r, 10));
    holder.kill();
    clock.onMachine('boot-2', 1_000);
    clock.advance(LEASE - 1);
    const b = open(clock.process());
    await expect(b.ledger.once('rebooted', {}, async () => 'again')).rejects.toBeInstanceOf(IdempotencyInProgressError);
    clock.advance(1);
    expect(await b.ledger.once('rebooted', {}, async () => 'again')).toBe('again');

    // A claim older code wrote: it sets no machine lease.
    const wall = new ManualClock();
    const old = open(wall.process());
    void old.ledger.once('old', {}, () => new Promise(() => {}), { leaseMs: LEASE });
    await new Promise((r) => setTimeout(r, 10));
    const c = open(new ManualClock(wall.ms + LEASE).onMachine());
    expect(await c.ledger.once('old', {}, async () => 'again')).toBe('again');

    // Older code took over a claim this code wrote, leaving that claim's machine lease behind: its own
    // lease, renewed on the wall clock, holds the key after the machine lease it left ran out.
    const line = new ManualClock().onMachine();
    const dead = line.process();
    void open(dead).ledger.once('taken', {}, () => new Promise(() => {}), { leaseMs: LEASE });
    await new Promise((r) => setTimeout(r, 10));
    dead.kill();
    line.ms += 2 * HOUR_MS;
    c.db.prepare("UPDATE ledger SET owner = 'older code', lease_until = ?, updated_at = ? WHERE key = 'taken'").run(line.ms + 10 * LEASE, line.ms);
    line.advance(LEASE + 1);
    await expect(open(line.process()).ledger.once('taken', {}, async () => 'beside it')).rejects.toBeInstanceOf(IdempotencyInProgressError);
  });
});

describe('the machine\'s clock (machine-time.ts)', () => {
  it.runIf(process.platform === 'linux')('is one clock for every process on the machine: a child process reads it between two readings of its parent, on the same boot', () => {
    const before = machineTime()!;
    const child = execFileSync(process.execPath, ['--import', 'tsx', '-e', "import('./lib/machine-time.ts').then((m) => process.stdout.write(JSON.stringify(m.machineTime())))"], { encoding: 'utf8' });
    const after = machineTime()!;
    const read = JSON.parse(child) as { boot: string; ms: number };
    expect(read.boot).toBe(before.boot);
    expect(read.boot).toMatch(/^[0-9a-f-]{36}$/);
    // performance.now() would read a few hundred ms in a fresh process, far below the parent's reading.
    expect(read.ms).toBeGreaterThanOrEqual(before.ms);
    expect(read.ms).toBeLessThanOrEqual(after.ms);
  });
});
