import { LEASE_MARGIN_MS, MAX_LEASE_MS, MIN_LEASE_MS, renewEveryMs } from '../core/lease.ts';

/**
 * One look at another attempt's in-progress claim: whose it is (`token`) and which of its holder's writes
 * it is (`rev`, fresh at every claim and renewal; absent on a claim older code wrote, which is just one
 * more value). `leaseUntil` is part of it too: older code renews without a rev, but always with a new lease.
 */
export interface Sighting {
  token: string | undefined;
  rev: string | undefined;
  leaseUntil: number;
}

/**
 * How long a contender watches a claim whose lease its own wall clock says ran out before it takes it over:
 * two of its holder's renewal intervals and the margin. A live holder writes a new rev every interval, so
 * one renewal may fail or come late and the next still shows it alive. Machines share no clock, so this
 * is timed on the contender's own monotonic time: a wall clock running ahead no longer ends a live claim.
 */
export function watchMs(holderLeaseMs: number): number {
  return 2 * renewEveryMs(holderLeaseMs) + LEASE_MARGIN_MS;
}

/**
 * How long a holder counts its claim as its own after the send of its last confirmed write: half the
 * margin inside a contender's watch, so a holder cut off from the table (a brownout past two renewals)
 * has aborted its effect's signal before anyone may take the key over (lib/lease-renewal.ts, heldForMs).
 */
export function heldForMs(leaseMs: number): number {
  return watchMs(leaseMs) - LEASE_MARGIN_MS / 2;
}

/**
 * The holder's lease, as its last write gave it: claim and renewal write `leaseUntil` and `updatedAt` from
 * one reading of its clock. Our own lease where the item cannot say (the same step asks for the same one).
 */
export function holderLeaseMs(leaseUntil: number, updatedAt: number, ownLeaseMs: number): number {
  const ms = leaseUntil - updatedAt;
  return Number.isFinite(ms) && ms >= MIN_LEASE_MS && ms <= MAX_LEASE_MS ? ms : ownLeaseMs;
}

/** Sightings kept per ledger; beyond this the oldest is forgotten (its next try only watches again). */
const KEPT = 1000;

/**
 * What this process saw of other attempts' claims, and since when on its monotonic time: a try that comes
 * back (a retry in the same warm Lambda or worker) and finds the same claim unchanged has watched it for
 * that long already, and need not wait the whole window again.
 */
export class ClaimSightings {
  private readonly seen = new Map<string, Sighting & { since: number }>();

  /** Notes `sighting` of `key`'s claim at `at`; returns how long it has been seen unchanged (0 if new). */
  note(key: string, sighting: Sighting, at: number): number {
    const last = this.seen.get(key);
    if (last && last.token === sighting.token && last.rev === sighting.rev && last.leaseUntil === sighting.leaseUntil) return Math.max(0, at - last.since);
    this.seen.delete(key);
    if (this.seen.size >= KEPT) this.seen.delete(this.seen.keys().next().value!);
    this.seen.set(key, { ...sighting, since: at });
    return 0;
  }

  forget(key: string): void {
    this.seen.delete(key);
  }

  get size(): number {
    return this.seen.size;
  }
}
