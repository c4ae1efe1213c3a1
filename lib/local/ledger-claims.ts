import { LEASE_MARGIN_MS, MAX_LEASE_MS, renewEveryMs } from '../core/lease.ts';
import type { MachineTime } from '../machine-time.ts';
import { CLOCK_STEP_TOLERANCE_MS } from './clock-step.ts';

/** A ledger row's lease, as its claim and each renewal wrote it (sqlite-ledger.ts). */
export interface ClaimLease {
  owner: string | null; lease_until: number; updated_at: number;
  machine_boot: string | null; machine_until: number | null; machine_owner: string | null;
}

/**
 * How long the claim in `row` is held from now: on the machine's clock when the claim's holder wrote its
 * lease there on this boot, else on the wall clock. 0 or less: it is free.
 */
export function leaseLeftMs(row: ClaimLease, now: number, machine: MachineTime | undefined): number {
  const onMachine = machine && row.machine_until !== null && row.machine_boot === machine.boot && row.machine_owner === row.owner;
  return onMachine ? row.machine_until! - machine.ms : row.lease_until - now;
}

/**
 * How long a holder counts its claim as its own after its last confirmed write, on its own monotonic time:
 * a little inside the lease, which another process on the machine takes the key over at (leaseLeftMs), so
 * a holder whose renewals fail (the file locked past the busy timeout) has aborted its effect's signal by
 * then, where it looked only at its next renewal tick, just after the lease had ended
 * (lib/lease-renewal.ts, heldForMs).
 */
export function heldForMs(leaseMs: number): number {
  return leaseMs - Math.min(LEASE_MARGIN_MS / 2, renewEveryMs(leaseMs) / 2);
}

/**
 * leaseLeftMs as a claim would judge the row once it has rebased a lease written after now (the clock
 * stepped back: sqlite-ledger.ts rebaseClaim), without writing: for a reader that must agree with the
 * next claim of the key (a run's delete) and not take it over.
 */
export function claimLeftMs(row: ClaimLease, now: number, machine: MachineTime | undefined): number {
  if (row.updated_at <= now + CLOCK_STEP_TOLERANCE_MS) return leaseLeftMs(row, now, machine);
  const leaseMs = Math.min(MAX_LEASE_MS, Math.max(0, row.lease_until - row.updated_at));
  return leaseLeftMs({ ...row, lease_until: Math.min(row.lease_until, now + leaseMs) }, now, machine);
}
