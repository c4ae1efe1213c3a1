import { InvalidInputError } from './errors.ts';

/**
 * Leases on idempotency keys. A claim lasts `leaseMs` unless its holder renews it; the holder renews it
 * every third of that while its effect runs, so a claim outlives its holder by at most one lease.
 */
export const DEFAULT_LEASE_MS = 60_000;
export const MIN_LEASE_MS = 1_000;
/** A dead holder blocks its key this long at most; a longer lease would only delay the retry. */
export const MAX_LEASE_MS = 3_600_000;
/** Waiting for another worker's lease to end adds this, for clocks that differ a little between machines. */
export const LEASE_MARGIN_MS = 1_000;

/** The lease a `once` call asked for, or the default; anything else is the caller's bug, said clearly. */
export function leaseMsOf(options: { leaseMs?: number } = {}): number {
  const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  if (!Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS) {
    throw new InvalidInputError(`once: leaseMs must be a whole number of milliseconds from ${MIN_LEASE_MS} to ${MAX_LEASE_MS}, not ${String(options.leaseMs)}`);
  }
  return leaseMs;
}

/** Two renewals can fail or come late before the claim lapses. */
export function renewEveryMs(leaseMs: number): number {
  return Math.floor(leaseMs / 3);
}

/**
 * How long a second attempt waits before asking again: until the lease ends, plus the margin. Never more
 * than the longest lease: a holder whose clock runs far ahead must not park the step for hours.
 */
export function retryAfterMs(leaseUntil: number, now: number): number {
  const left = Number.isFinite(leaseUntil - now) ? leaseUntil - now : DEFAULT_LEASE_MS;
  return Math.min(MAX_LEASE_MS, Math.max(0, left)) + LEASE_MARGIN_MS;
}
