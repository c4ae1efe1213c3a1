import { MAX_LEASE_MS } from '../core/lease.ts';
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
 * leaseLeftMs as a claim would judge the row once it has rebased a lease written after now (the clock
 * stepped back: sqlite-ledger.ts rebaseClaim), without writing: for a reader that must agree with the
 * next claim of the key (a run's delete) and not take it over.
 */
export function claimLeftMs(row: ClaimLease, now: number, machine: MachineTime | undefined): number {
  if (row.updated_at <= now + CLOCK_STEP_TOLERANCE_MS) return leaseLeftMs(row, now, machine);
  const leaseMs = Math.min(MAX_LEASE_MS, Math.max(0, row.lease_until - row.updated_at));
  return leaseLeftMs({ ...row, lease_until: Math.min(row.lease_until, now + leaseMs) }, now, machine);
}
