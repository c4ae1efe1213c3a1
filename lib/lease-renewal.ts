import { ClaimLostError } from './core/errors.ts';
import { LEASE_MARGIN_MS, renewEveryMs } from './core/lease.ts';
import { everyOn, type Clock } from './ports.ts';

/**
 * Runs a ledger's effect while a timer renews its claim every third of the lease, so the claim lives as
 * long as this process does (like a queue message's heartbeat). `renew` answers false when the claim is
 * no longer ours: then the effect's signal aborts and renewing stops.
 *
 * A renewal that fails for another reason (a throttle, a locked file) is tried again at the next tick,
 * while the lease still runs by this process's own clock. Once it has run out with no renewal confirmed,
 * the claim is no longer known to be ours (a holder that froze past its lease and comes back to a
 * throttled store cannot tell whether another attempt took the key), so the signal aborts then too: an
 * effect that checks its signal before it acts never acts on a claim it may have lost.
 *
 * "Run out" is read two ways, and either aborts: by the clock (the lease the store holds is on the clocks of
 * the workers that read it, and a process frozen in a suspended machine sees it jump), and by the time this
 * process has run since the last confirmed renewal (performance.now()): a clock stepped back an hour
 * (NTP, a VM restored) kept a claim the other workers saw run out held for that hour more.
 *
 * `onMachine`: the store reads the lease on the machine's monotonic clock (the SQLite ledger, whose workers
 * share one machine), so the holder does too: a wall clock stepped forward while a renewal is refused would
 * otherwise abort an effect whose claim nobody else can take.
 *
 * `heldForMs`: the store lets a contender take the claim over once it has watched it unchanged for a window
 * on the contender's own time, whatever the lease says (the DynamoDB ledger: lib/aws/claim-sightings.ts).
 * The holder then gives up on its own time too, a little inside that window, counted from the send of its
 * last confirmed write (the claim at `claimSentAt`, then each renewal): a contender's watch starts no earlier
 * than that write landed. A check every quarter of the margin catches it even while a renewal hangs, where
 * the renewal ticks alone, a third of a lease apart, would have caught it only after the takeover. The
 * SQLite ledger gives it too: a little inside its lease, when another process on the machine takes over.
 */
export async function holdWhileRenewing<T>(input: {
  key: string;
  clock: Clock;
  leaseMs: number;
  renew: () => Promise<boolean> | boolean;
  effect: (signal: AbortSignal) => T | Promise<T>;
  /** Renewing stops when this aborts (the step's try ran out of time); the effect's signal aborts with its reason. */
  stop?: AbortSignal;
  onMachine?: boolean;
  heldForMs?: number;
  claimSentAt?: number;
  /** `renew` answers synchronously (SQLite): at heldForMs it is asked once more before the claim is given up. */
  answersAtOnce?: boolean;
}): Promise<T> {
  const lost = new AbortController();
  const leaseNow = leaseClock(input.clock, input.onMachine);
  // The claim was written just before this call, with a lease from a moment no later than now.
  let heldUntil = leaseNow() + input.leaseMs;
  const processNow = () => processTime(input.clock);
  let confirmedAt = input.claimSentAt ?? processNow();
  let inFlight = false;
  // The renewal timer, and with heldForMs the give-up check.
  const timers: Array<() => void> = [];
  const stop = () => { for (const cancel of timers) cancel(); };
  const end = (reason: unknown) => {
    if (lost.signal.aborted) return;
    stop();
    lost.abort(reason);
  };
  // With a reason: given up by this holder; without: the store said the key is another attempt's.
  const abort = (givenUp?: string) => end(new ClaimLostError(input.key, givenUp));
  const settle = (sentAt: number, sentAfter: number, ours: boolean) => {
    if (!ours) return abort();
    heldUntil = Math.max(heldUntil, sentAt + input.leaseMs);
    confirmedAt = Math.max(confirmedAt, sentAfter);
  };
  const unconfirmed = () => {
    if (leaseNow() >= heldUntil || processNow() - confirmedAt >= input.leaseMs) abort('its lease ran out and no renewal could be confirmed');
  };
  const renewNow = () => {
    // One renewal at a time: a slow write is not piled on by the next tick.
    if (lost.signal.aborted || inFlight) return unconfirmed();
    // The store writes a lease from its own reading of the clock, taken after this one.
    const sentAt = leaseNow();
    const sentAfter = processNow();
    let answer: Promise<boolean> | boolean;
    try {
      answer = input.renew();
    } catch {
      return unconfirmed();
    }
    if (typeof answer === 'boolean') return settle(sentAt, sentAfter, answer);
    inFlight = true;
    return answer.then((ours) => settle(sentAt, sentAfter, ours), unconfirmed).finally(() => { inFlight = false; });
  };
  if (input.heldForMs !== undefined) {
    const heldForMs = input.heldForMs;
    timers.push(everyOn(input.clock, LEASE_MARGIN_MS / 4, () => {
      if (lost.signal.aborted || processNow() - confirmedAt < heldForMs) return;
      // A store that answers at once (SQLite) is asked first: a holder back from a freeze keeps a claim
      // nobody took. One whose answer takes a round trip (DynamoDB) cannot be waited for here.
      if (input.answersAtOnce && !inFlight) void renewNow();
      if (processNow() - confirmedAt >= heldForMs) abort(`no renewal was confirmed for ${heldForMs} ms, after which another attempt may take the key over`);
    }));
  }
  timers.push(everyOn(input.clock, renewEveryMs(input.leaseMs), renewNow));
  const onStop = () => end(input.stop!.reason);
  if (input.stop?.aborted) onStop();
  else input.stop?.addEventListener('abort', onStop, { once: true });
  try {
    return await input.effect(lost.signal);
  } finally {
    stop();
    input.stop?.removeEventListener('abort', onStop);
  }
}

/**
 * This process's own time, which no step of the wall clock moves: the clock's monotonic() where it has one
 * (a test clock's line), else performance.now(). Never now(): a clock stepped back would stretch a claim.
 */
export function processTime(clock: Clock): number {
  return clock.monotonic ? clock.monotonic() : performance.now();
}

/** The clock the store reads the lease on: the machine's, where asked and the clock has one; else the wall clock. */
function leaseClock(clock: Clock, onMachine = false): () => number {
  if (onMachine && clock.machineTime?.()) return () => clock.machineTime!()!.ms;
  return () => clock.now();
}
