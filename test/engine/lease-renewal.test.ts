import { describe, expect, it, vi } from 'vitest';
import { holdWhileRenewing } from '../../lib/lease-renewal.ts';
import { ManualClock } from '../support/manual-clock.ts';

const LEASE_MS = 60_000;

/** An effect held open by the test, with the signal it was given. */
function heldEffect() {
  let finish!: (value: string) => void;
  let signal: AbortSignal | undefined;
  const done = new Promise<string>((resolve) => { finish = resolve; });
  return { effect: async (s: AbortSignal) => { signal = s; return done; }, finish: (v: string) => finish(v), signal: () => signal! };
}

describe('holding a claim while its effect runs (both ledgers)', () => {
  it('a store that never answers a renewal (throttled, locked) costs the claim once the lease has run out by the holder\'s clock', async () => {
    const clock = new ManualClock();
    const held = heldEffect();
    let renewals = 0;
    const running = holdWhileRenewing({ key: 'k/step-1', clock, leaseMs: LEASE_MS, effect: held.effect, renew: () => { renewals++; throw new Error('SQLITE_BUSY'); } });
    await clock.pass(LEASE_MS - 1);
    // Ticks at a third and two thirds of the lease failed, but the lease still runs: nothing is lost yet.
    expect(renewals).toBe(2);
    expect(held.signal().aborted).toBe(false);
    await clock.pass(1);
    expect(held.signal().aborted).toBe(true);
    expect(held.signal().reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('no renewal could be confirmed') });
    held.finish('done anyway');
    expect(await running).toBe('done anyway');
  });

  it('a confirmed renewal extends the lease from when it was sent; later refusals cost nothing until that runs out', async () => {
    const clock = new ManualClock();
    const held = heldEffect();
    let answer: 'ours' | 'busy' = 'ours';
    const running = holdWhileRenewing({
      key: 'k/step-2', clock, leaseMs: LEASE_MS, effect: held.effect,
      renew: async () => { if (answer === 'busy') throw new Error('ThrottlingException'); return true; },
    });
    await clock.pass(LEASE_MS / 3); // confirmed at 20 s: held until 80 s
    answer = 'busy';
    await clock.pass(LEASE_MS * 2 / 3 - 1); // ticks at 40 s and 60 s refused
    expect(held.signal().aborted).toBe(false);
    await clock.pass(LEASE_MS / 3 + 1); // the tick at 80 s is refused with the lease run out
    expect(held.signal().aborted).toBe(true);
    held.finish('x');
    await running;
  });

  it('a renewal that answers "not yours" aborts at once, lease or no lease', async () => {
    const clock = new ManualClock();
    const held = heldEffect();
    const running = holdWhileRenewing({ key: 'k/step-3', clock, leaseMs: LEASE_MS, effect: held.effect, renew: () => false });
    await clock.pass(LEASE_MS / 3);
    expect(held.signal().reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('another attempt took the key') });
    held.finish('x');
    await running;
  });

  it('a store that stops answering just as the holder\'s clock steps back an hour costs the claim once a lease has passed all the same, where it was kept for the hour', { timeout: 60_000 }, async () => {
    // Real time (the clock's own timers): the step moves the clock, not the time this process runs.
    let offset = 0;
    const clock = { now: () => Date.now() + offset };
    const held = heldEffect();
    let renewals = 0;
    const running = holdWhileRenewing({
      key: 'k/step-4', clock, leaseMs: 1000, effect: held.effect,
      renew: () => {
        if (++renewals === 1) return true;
        offset = -3_600_000;
        throw new Error('ThrottlingException');
      },
    });
    // Not a timing: a claim kept for the hour fails here.
    await vi.waitFor(() => expect(held.signal().aborted).toBe(true), { timeout: 20_000, interval: 50 });
    expect(held.signal().reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('no renewal could be confirmed') });
    held.finish('x');
    await running;
  });

  it('with its lease on the machine\'s clock (the SQLite ledger), a wall clock stepped forward while renewals are refused costs the claim only once the lease has run out on the machine\'s clock', async () => {
    for (const onMachine of [true, false]) {
      const clock = new ManualClock().onMachine();
      const held = heldEffect();
      const running = holdWhileRenewing({ key: 'k/step-5', clock, leaseMs: LEASE_MS, effect: held.effect, onMachine, renew: () => { throw new Error('SQLITE_BUSY'); } });
      await clock.pass(LEASE_MS / 3);
      clock.ms += 2 * 3_600_000;
      await clock.pass(LEASE_MS / 3);
      // On the wall clock the lease ran out two hours ago; on the machine's, 20 s are left.
      expect(held.signal().aborted).toBe(!onMachine);
      await clock.pass(LEASE_MS / 3);
      expect(held.signal().aborted).toBe(true);
      held.finish('x');
      await running;
    }
  });
  it('with heldForMs (the DynamoDB ledger), a renewal that hangs costs the claim that long after the claim was sent, not at a later tick', async () => {
    const clock = new ManualClock();
    const held = heldEffect();
    const claimSentAt = clock.monotonic();
    await clock.pass(300); // the claim's write took this long to answer
    let renewals = 0;
    const running = holdWhileRenewing({
      key: 'k/step-6', clock, leaseMs: LEASE_MS, effect: held.effect, heldForMs: 40_500, claimSentAt,
      renew: () => { renewals++; return new Promise<boolean>(() => {}); },
    });
    // 40.5 s after the claim was sent, with its first renewal still in flight: given up. Was: only at the
    // renewal tick at 60 s (or the lease's end), after a contender's 41 s watch could have taken the key.
    clock.advance(40_500 - 300 - 1);
    expect(held.signal().aborted).toBe(false);
    clock.advance(250);
    expect(renewals).toBe(1);
    expect(held.signal().reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('no renewal was confirmed for 40500 ms') });
    held.finish('x');
    await running;
  });

  it('with heldForMs, each confirmed renewal counts from when it was sent', async () => {
    const clock = new ManualClock();
    const held = heldEffect();
    let answer: 'ours' | 'busy' = 'ours';
    const running = holdWhileRenewing({
      key: 'k/step-7', clock, leaseMs: LEASE_MS, effect: held.effect, heldForMs: 40_500, claimSentAt: clock.monotonic(),
      renew: async () => { if (answer === 'busy') throw new Error('ThrottlingException'); return true; },
    });
    await clock.pass(20_000); // confirmed, sent at 20 s
    answer = 'busy';
    await clock.pass(40_000); // refused at 40 s; 60 s - 20 s is under 40.5 s
    expect(held.signal().aborted).toBe(false);
    await clock.pass(500);
    expect(held.signal().aborted).toBe(true);
    held.finish('x');
    await running;
  });
  it('with heldForMs and a store that answers at once (SQLite), the holder asks once more at the deadline: kept if the claim is still its, given up if the store cannot say', async () => {
    for (const answer of ['ours', 'busy'] as const) {
      const root = new ManualClock().onMachine();
      const holder = root.process();
      const held = heldEffect();
      let renewals = 0;
      const running = holdWhileRenewing({
        key: 'k/step-8', clock: holder, leaseMs: LEASE_MS, effect: held.effect, onMachine: true, answersAtOnce: true, heldForMs: 59_500, claimSentAt: holder.monotonic(),
        renew: () => { renewals++; if (answer === 'busy') throw new Error('SQLITE_BUSY'); return true; },
      });
      // Frozen (a SIGSTOP) past the deadline: on thaw, the give-up check fires before the renewal tick.
      holder.freeze();
      await root.pass(LEASE_MS + 5_000);
      await holder.thaw();
      expect(renewals).toBeGreaterThanOrEqual(1);
      expect(held.signal().aborted, answer).toBe(answer === 'busy');
      held.finish('x');
      await running;
    }
  });
});
