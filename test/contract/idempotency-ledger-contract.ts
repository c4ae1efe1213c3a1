import { describe, expect, it } from 'vitest';
import { IdempotencyInProgressError, IdempotencyKeyReuseError, InvalidInputError, NewerFormatError, PermanentError } from '../../lib/core/errors.ts';
import type { IdempotencyLedger } from '../../lib/ports.ts';
import { ManualClock } from '../support/manual-clock.ts';

export interface LedgerContractSubject {
  /** The ledger as one worker process sees it, with that process's clock (its timers renew leases). */
  ledger(clock: ManualClock): IdempotencyLedger;
  /** Rewrites the key's record as newer code would write it: with this ledger format. */
  setFormat(key: string, format: number): Promise<void>;
  /**
   * The holder gives up a claim it could not confirm for less than a lease, as a contender may take it
   * over sooner (the DynamoDB ledger's watch: lib/aws/claim-sightings.ts). A holder frozen past a lease
   * finds its signal aborted on thaw, before its first renewal can say whether anyone took the key.
   */
  givesUpBeforeLease?: boolean;
}

let counter = 0;
const uniqueKey = (label: string) => `${label}-${process.pid}-${Date.now()}-${counter++}/step-1`;

/** An effect the test finishes by hand, so it can last longer than a lease. */
export class HeldEffect<T = string> {
  runs = 0;
  signal: AbortSignal | undefined;
  private readonly entered: Promise<void>;
  private enter!: () => void;
  private readonly gate: Promise<T>;
  private open!: (value: T) => void;
  private shut!: (error: Error) => void;

  constructor() {
    this.entered = new Promise((resolve) => { this.enter = resolve; });
    this.gate = new Promise<T>((resolve, reject) => { this.open = resolve; this.shut = reject; });
    this.gate.catch(() => undefined);
  }

  readonly effect = (signal?: AbortSignal): Promise<T> => {
    this.runs++;
    this.signal = signal;
    this.enter();
    return this.gate;
  };

  started(): Promise<void> { return this.entered; }
  finish(value: T): void { this.open(value); }
  fail(error = new Error('the effect failed')): void { this.shut(error); }
}

const LEASE_MS = 60_000;

/**
 * The idempotency ledger contract: the SQLite ledger and the DynamoDB ledger run this same suite. A
 * claim has an owner; it lives while its holder renews it; a holder that lost it (frozen past its lease)
 * finds out and never undoes the new owner's claim; an effect that happened is never run a third time.
 */
export function idempotencyLedgerContract(name: string, subject: () => LedgerContractSubject): void {
  describe(`IdempotencyLedger contract: ${name}`, () => {
    const worker = (clock: ManualClock) => subject().ledger(clock.process());
    const notAgain = async (): Promise<string> => { throw new Error('the effect ran again'); };

    it('applies an effect once and returns the remembered result to a retry', async () => {
      const clock = new ManualClock();
      const ledger = worker(clock);
      const key = uniqueKey('once');
      let applied = 0;
      const effect = async () => ({ rows: ++applied });
      expect(await ledger.once(key, { batch: 1 }, effect)).toEqual({ rows: 1 });
      expect(await worker(clock).once(key, { batch: 1 }, effect)).toEqual({ rows: 1 });
      expect(applied).toBe(1);
    });

    it('gives the effect\'s caller its result as a retry reads it back: a Date, a Map, undefined are the same after a crash as before', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('as-stored');
      const effect = async () => ({ at: new Date(0), rows: new Map([['a', 1]]), note: undefined, list: [undefined] });
      const first = await worker(clock).once(key, { batch: 1 }, effect);
      clock.advance(LEASE_MS * 3);
      const retry = await worker(clock).once(key, { batch: 1 }, notAgain);
      // The Map as what it holds, where JSON made it {} (once-result.ts).
      expect(retry).toEqual({ at: '1970-01-01T00:00:00.000Z', rows: { a: 1 }, list: [null] });
      // Not a Date on the first try and a string on the retry: a tool that called a Date's method broke only after a crash.
      expect(first).toStrictEqual(retry);
      expect(await worker(clock).once(uniqueKey('undefined'), {}, async () => undefined)).toBeNull();
    });

    it.each([
      ['refers to itself', () => { const o: Record<string, unknown> = {}; o.self = o; return o; }, 'it refers to itself: self is the whole value again'],
      ['holds a BigInt', () => ({ rows: [{ id: 10n }] }), 'a BigInt at rows.0.id: write it as a string or a number'],
      // JSON.stringify writes it as {}: the key kept {} for good, the insert's id never known.
      ['holds a promise (an await left out)', () => ({ id: Promise.resolve(7) }), 'a promise at id: await it'],
      ['is a function', () => () => 1, 'it is a function'],
      // What JSON.stringify throws past V8's longest string, without building 512 MB to get there.
      ['is too long for one string', () => ({ toJSON: () => { throw new RangeError('Invalid string length'); } }), 'its JSON would be longer than the longest string JavaScript can hold, about 512 MB'],
    ])('an effect whose result %s fails with the reason, and its key is completed: it never runs again', async (_what, result, why) => {
      const clock = new ManualClock();
      const key = uniqueKey('unstorable');
      let applied = 0;
      const effect = async () => { applied++; return result(); };
      const error = await worker(clock).once(key, { batch: 1 }, effect).then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(PermanentError);
      expect((error as Error).message).toBe(`the effect under ${key} ran, but its result cannot be stored as JSON (${why}): it is kept as null and will not run again under this key; return plain data from it`);
      // The next try, with the lease long gone: the result on record, not a second run.
      clock.advance(LEASE_MS * 3);
      expect(await worker(clock).once(key, { batch: 1 }, effect)).toBeNull();
      expect(applied).toBe(1);
    });

    it('refuses a key used again with other arguments (key order does not matter)', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('reuse');
      await worker(clock).once(key, { a: 1, b: 2 }, async () => 'ok');
      expect(await worker(clock).once(key, { b: 2, a: 1 }, async () => 'again')).toBe('ok');
      await expect(worker(clock).once(key, { a: 1, b: 3 }, async () => 'other')).rejects.toBeInstanceOf(IdempotencyKeyReuseError);
    });

    it('lets exactly one of several concurrent attempts apply the effect', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('concurrent');
      let applied = 0;
      const effect = async () => { applied++; await new Promise((r) => setTimeout(r, 50)); return 'done'; };
      const results = await Promise.allSettled(Array.from({ length: 5 }, () => worker(clock).once(key, { x: 1 }, effect)));
      expect(applied).toBe(1);
      expect(results.filter((r) => r.status === 'fulfilled').length).toBeGreaterThanOrEqual(1);
      for (const r of results) {
        if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(IdempotencyInProgressError);
        else expect(r.value).toBe('done');
      }
    });

    it('releases the claim when the effect fails, so the retry runs it', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('release');
      await expect(worker(clock).once(key, {}, async () => { throw new Error('boom'); })).rejects.toThrow('boom');
      expect(await worker(clock).once(key, {}, async () => 'second try')).toBe('second try');
    });

    it('applies a synchronous effect (a better-sqlite3 transaction) as an async one: its result remembered, its throw a failed effect whose claim is released', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('sync');
      // A rejected promise, not a throw out of once: the caller's await sees it as it would an async one's.
      const failed = worker(clock).once(key, {}, () => { throw new Error('boom'); });
      await expect(failed).rejects.toThrow('boom');
      let applied = 0;
      const effect = () => ({ rows: ++applied });
      expect(await worker(clock).once(key, {}, effect)).toEqual({ rows: 1 });
      expect(await worker(clock).once(key, {}, effect)).toEqual({ rows: 1 });
      expect(applied).toBe(1);
    });

    it('holds a dead attempt\'s claim until its lease ends, says when that is, then lets the effect run again', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('dead');
      const dead = clock.process();
      const crashed = new HeldEffect();
      void subject().ledger(dead).once(key, { y: 1 }, crashed.effect, { leaseMs: 30_000 });
      await crashed.started();
      const claimedAt = clock.now();
      dead.kill();

      await clock.pass(10_000);
      const refused = await worker(clock).once(key, { y: 1 }, notAgain).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(IdempotencyInProgressError);
      const busy = refused as IdempotencyInProgressError;
      expect(busy.leaseUntil).toBe(claimedAt + 30_000);
      // Wait until the lease ends, plus only a little.
      expect(busy.retryAfterMs).toBeGreaterThan(20_000);
      expect(busy.retryAfterMs).toBeLessThanOrEqual(25_000);

      await clock.pass(20_001);
      // A ledger may watch the claim a while on its own time before it takes it over (DynamoDB's does).
      expect(await clock.settle(worker(clock).once(key, { y: 1 }, async () => 'taken over'))).toBe('taken over');
      expect(crashed.runs).toBe(1);
    });

    it('renews the lease while the effect runs: a 70 s effect under a 60 s lease keeps its claim', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('renew');
      const slow = new HeldEffect();
      const first = worker(clock).once(key, {}, slow.effect, { leaseMs: LEASE_MS });
      await slow.started();

      await clock.pass(61_000);
      await expect(worker(clock).once(key, {}, notAgain)).rejects.toBeInstanceOf(IdempotencyInProgressError);
      await clock.pass(9_000);
      const refused = await worker(clock).once(key, {}, notAgain).catch((e: unknown) => e) as IdempotencyInProgressError;
      expect(refused).toBeInstanceOf(IdempotencyInProgressError);
      // The claim was renewed at most a third of a lease ago.
      expect(refused.leaseUntil).toBeGreaterThanOrEqual(clock.now() + LEASE_MS - LEASE_MS / 3);
      expect(slow.signal?.aborted).toBe(false);

      slow.finish('after 70 s');
      expect(await first).toBe('after 70 s');
      // The renewal stopped with the effect: nothing keeps a completed key busy.
      await clock.pass(LEASE_MS * 2);
      expect(await worker(clock).once(key, {}, notAgain)).toBe('after 70 s');
      expect(slow.runs).toBe(1);
    });

    it('stops renewing when its signal aborts (the step ran out of time): the effect\'s signal aborts with that reason, and the claim ends with its lease, not before', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('stopped');
      const hung = new HeldEffect();
      const stop = new AbortController();
      void worker(clock).once(key, {}, hung.effect, { leaseMs: LEASE_MS, signal: stop.signal }).catch(() => undefined);
      await hung.started();
      await clock.pass(LEASE_MS / 2);
      const reason = new Error('tool charge did not finish within 40 ms (its timeoutMs)');
      stop.abort(reason);
      expect(hung.signal?.aborted).toBe(true);
      expect(hung.signal?.reason).toBe(reason);
      // Not released: the effect may still be running. The last renewal's lease still holds the key...
      await clock.pass(LEASE_MS / 2);
      await expect(worker(clock).once(key, {}, notAgain)).rejects.toBeInstanceOf(IdempotencyInProgressError);
      // ...and nothing renews it: once that lease has run out, the next try takes the key.
      await clock.pass(LEASE_MS);
      expect(await clock.settle(worker(clock).once(key, {}, async () => 'the next try'))).toBe('the next try');
      expect(hung.runs).toBe(1);
    });

    it('a signal that aborted before the claim aborts the effect\'s signal at once', async () => {
      const clock = new ManualClock();
      const stop = new AbortController();
      stop.abort(new Error('out of time'));
      const seen = await worker(clock).once(uniqueKey('stopped-early'), {}, async (signal) => signal.aborted, { signal: stop.signal });
      expect(seen).toBe(true);
    });

    /** A holds the claim and freezes past its lease; B takes the key over. */
    async function frozenHolder(label: string) {
      const clock = new ManualClock();
      const key = uniqueKey(label);
      const frozen = clock.process();
      const a = new HeldEffect();
      // Each holder's word that its effect finished after its claim was lost (onClaimLost).
      const lost = { a: 0, b: 0 };
      const aDone = subject().ledger(frozen).once(key, {}, a.effect, { leaseMs: LEASE_MS, onClaimLost: () => { lost.a++; } }).then((v) => ({ value: v }), (e: unknown) => ({ error: e }));
      await a.started();
      frozen.freeze();
      await clock.pass(LEASE_MS + 1);
      const b = new HeldEffect();
      const bDone = worker(clock).once(key, {}, b.effect, { leaseMs: LEASE_MS, onClaimLost: () => { lost.b++; } }).then((v) => ({ value: v }), (e: unknown) => ({ error: e }));
      await clock.settle(b.started());
      // A comes back: its first renewal finds the claim is no longer its own.
      await frozen.thaw();
      return { clock, key, a, aDone, b, bDone, lost };
    }

    it('tells a holder whose effect finished after its claim was lost, whichever way the new owner went; never the owner', async () => {
      // The new owner still holds the key.
      const holding = await frozenHolder('lost-while-held');
      holding.a.finish('A');
      await holding.aDone;
      expect(holding.lost).toEqual({ a: 1, b: 0 });
      holding.b.finish('B');
      await holding.bDone;
      expect(holding.lost).toEqual({ a: 1, b: 0 });
      // The new owner completed first.
      const completed = await frozenHolder('lost-after-completed');
      completed.b.finish('B');
      await completed.bDone;
      completed.a.finish('A');
      await completed.aDone;
      expect(completed.lost).toEqual({ a: 1, b: 0 });
      // The new owner failed and released the key first.
      const released = await frozenHolder('lost-after-released');
      released.b.fail(new Error('B gave up'));
      await released.bDone;
      released.a.finish('A');
      await released.aDone;
      expect(released.lost).toEqual({ a: 1, b: 0 });
    });

    it('a holder that froze past its lease finds out when it comes back: its renewal fails and its effect\'s signal aborts', async () => {
      const { a, b } = await frozenHolder('frozen-finds-out');
      expect(a.signal?.aborted).toBe(true);
      expect(b.signal?.aborted).toBe(false);
    });

    it('a holder that froze past its lease and then fails does not release the new owner\'s claim', async () => {
      const { clock, key, a, aDone, b, bDone } = await frozenHolder('frozen-fails');
      a.fail(new Error('A gave up'));
      expect(await aDone).toMatchObject({ error: expect.objectContaining({ message: 'A gave up' }) });
      // B still holds the key: nobody else may start the effect.
      await expect(worker(clock).once(key, {}, notAgain)).rejects.toBeInstanceOf(IdempotencyInProgressError);
      await clock.pass(LEASE_MS / 2);
      await expect(worker(clock).once(key, {}, notAgain)).rejects.toBeInstanceOf(IdempotencyInProgressError);
      b.finish('B');
      expect(await bDone).toEqual({ value: 'B' });
      expect(await worker(clock).once(key, {}, notAgain)).toBe('B');
      expect(a.runs + b.runs).toBe(2);
    });

    it('a holder that froze past its lease and then completes keeps the new owner\'s claim, and the key keeps one result', async () => {
      const { clock, key, a, aDone, b, bDone } = await frozenHolder('frozen-completes');
      a.finish('A');
      // The effect happened: A's result is on record (so no third attempt runs), and B's claim is untouched.
      expect(await aDone).toEqual({ value: 'A' });
      expect(await worker(clock).once(key, {}, notAgain)).toBe('A');
      await clock.pass(LEASE_MS);
      await expect(worker(clock).once(key, {}, notAgain)).resolves.toBe('A');
      b.finish('B');
      expect(await bDone).toEqual({ value: 'A' });
      expect(await worker(clock).once(key, {}, notAgain)).toBe('A');
    });

    it('when the new owner fails after the frozen holder completed, the key stays completed: no third attempt', async () => {
      const { clock, key, a, aDone, b, bDone } = await frozenHolder('frozen-then-owner-fails');
      a.finish('A');
      expect(await aDone).toEqual({ value: 'A' });
      b.fail(new Error('B gave up'));
      expect(await bDone).toMatchObject({ error: expect.objectContaining({ message: 'B gave up' }) });
      expect(await worker(clock).once(key, {}, notAgain)).toBe('A');
    });

    it('when the new owner dies after the frozen holder completed, the next attempt gets the result once the lease ends', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('frozen-then-owner-dies');
      const frozen = clock.process();
      const a = new HeldEffect();
      const aDone = subject().ledger(frozen).once(key, {}, a.effect, { leaseMs: LEASE_MS });
      await a.started();
      frozen.freeze();
      await clock.pass(LEASE_MS + 1);
      const doomed = clock.process();
      const b = new HeldEffect();
      void subject().ledger(doomed).once(key, {}, b.effect, { leaseMs: LEASE_MS });
      await clock.settle(b.started());
      await frozen.thaw();
      a.finish('A');
      expect(await aDone).toBe('A');
      doomed.kill();
      await clock.pass(LEASE_MS + 1);
      expect(await worker(clock).once(key, {}, notAgain)).toBe('A');
    });

    it('a frozen holder that completes after the new owner failed and released records its result: no third attempt', async () => {
      const { clock, key, a, aDone, b, bDone } = await frozenHolder('owner-released');
      b.fail(new Error('B gave up'));
      expect(await bDone).toMatchObject({ error: expect.objectContaining({ message: 'B gave up' }) });
      a.finish('A');
      expect(await aDone).toEqual({ value: 'A' });
      expect(await worker(clock).once(key, {}, notAgain)).toBe('A');
    });

    it('a frozen holder that completes after the new owner completed gets the recorded result', async () => {
      const { clock, key, a, aDone, b, bDone } = await frozenHolder('owner-completed');
      b.finish('B');
      expect(await bDone).toEqual({ value: 'B' });
      a.finish('A');
      expect(await aDone).toEqual({ value: 'B' });
      expect(await worker(clock).once(key, {}, notAgain)).toBe('B');
    });

    it('a holder whose lease ran out while nobody took the key over still completes it', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('late');
      const frozen = clock.process();
      const a = new HeldEffect();
      let lost = 0;
      const aDone = subject().ledger(frozen).once(key, {}, a.effect, { leaseMs: LEASE_MS, onClaimLost: () => { lost++; } });
      await a.started();
      frozen.freeze();
      await clock.pass(LEASE_MS * 2);
      await frozen.thaw();
      // Nobody took the claim: A's renewal finds it still A's. A ledger whose contenders may take a claim
      // over sooner than a lease has aborted A's signal all the same: A could not know before it asked.
      expect(a.signal?.aborted).toBe(subject().givesUpBeforeLease === true);
      a.finish('A');
      expect(await aDone).toBe('A');
      // Its claim was never lost: nothing to tell.
      expect(lost).toBe(0);
      expect(await worker(clock).once(key, {}, notAgain)).toBe('A');
    });

    it.each([
      ['zero', 0], ['negative', -5], ['fractional', 1500.5], ['not a number', Number.NaN], ['under a second', 999], ['over an hour', 3_600_001],
    ])('refuses a %s lease with a clear error and claims nothing', async (_label, leaseMs) => {
      const clock = new ManualClock();
      const key = uniqueKey('bad-lease');
      let ran = 0;
      const refused = await worker(clock).once(key, {}, async () => ++ran, { leaseMs }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InvalidInputError);
      expect((refused as Error).message).toMatch(/leaseMs/);
      expect(ran).toBe(0);
      expect(await worker(clock).once(key, {}, async () => ++ran)).toBe(1);
    });

    it('refuses a record of a newer ledger format: its result is not returned, the effect not run, the record kept', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('newer-done');
      expect(await worker(clock).once(key, {}, async () => 'first')).toBe('first');
      await subject().setFormat(key, 2);
      const refused = await worker(clock).once(key, {}, notAgain).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(NewerFormatError);
      expect((refused as Error).message).toMatch(/ledger format 2/);
      // The same record, once code that reads it is back.
      await subject().setFormat(key, 1);
      expect(await worker(clock).once(key, {}, notAgain)).toBe('first');
    });

    it('does not take over a dead claim of a newer ledger format', async () => {
      const clock = new ManualClock();
      const key = uniqueKey('newer-claim');
      const dying = clock.process();
      const a = new HeldEffect();
      void subject().ledger(dying).once(key, {}, a.effect, { leaseMs: LEASE_MS }).catch(() => undefined);
      await a.started();
      dying.kill();
      await subject().setFormat(key, 2);
      await clock.pass(LEASE_MS * 2);
      let ran = 0;
      await expect(worker(clock).once(key, {}, async () => ++ran)).rejects.toBeInstanceOf(NewerFormatError);
      expect(ran).toBe(0);
    });
  });
}
