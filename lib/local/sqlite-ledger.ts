import { createHash, randomUUID } from 'node:crypto';
import { canonicalJson } from '../core/canonical-json.ts';
import { IdempotencyInProgressError, IdempotencyKeyReuseError, NewerFormatError } from '../core/errors.ts';
import { storableResult } from '../core/once-result.ts';
import { runOfKey } from '../core/keys.ts';
import { RECORD_FORMATS } from '../core/record-formats.ts';
import { MAX_LEASE_MS, leaseMsOf, retryAfterMs } from '../core/lease.ts';
import { holdWhileRenewing, processTime } from '../lease-renewal.ts';
import type { Logger } from '../log.ts';
import { CLOCK_STEP_TOLERANCE_MS, warnClockStep } from './clock-step.ts';
import { heldForMs, leaseLeftMs } from './ledger-claims.ts';
import type { Clock, IdempotencyLedger, OnceOptions } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { refuseMovedFile } from './moved-file.ts';
import { immediate, isBusy, preparedOnce, type Db } from './database.ts';

export { DEFAULT_LEASE_MS } from '../core/lease.ts';

interface LedgerRow {
  args_hash: string; status: 'in_progress' | 'completed'; result: string | null; lease_until: number; owner: string | null; updated_at: number; format: number | null;
  machine_boot: string | null; machine_until: number | null; machine_owner: string | null;
}

/** Tries of a completion the lock refuses, each after the busy timeout and a growing pause (0.1 to 0.8 s). */
const COMPLETE_TRIES = 5;

/** The format this code writes: NULL while it is 1, so rows are as they always were. */
const FORMAT = RECORD_FORMATS.ledger > 1 ? RECORD_FORMATS.ledger : null;

/**
 * Apply-once records, like Powertools' idempotency utility: claim the key with an in-progress lease, run
 * the effect while renewing the lease, store its result. A retry returns the stored result; a reused key
 * with other arguments is refused; the lease of a claim whose holder died runs out so the effect can be
 * tried again.
 *
 * Every claim has an owner (a random token per call), and only the owner renews, releases or completes
 * it. A holder that lost its claim (it froze past its lease and another attempt took the key) still
 * applied its effect, so its completion puts its result on record without touching the new owner's
 * claim: a result on record means the effect happened, and no later attempt runs it again.
 *
 * Each write is one local transaction that either commits or throws, so a write whose outcome is
 * unknown (the DynamoDB ledger's SDK retry after a lost answer) cannot happen here.
 *
 * A claim's lease is written on two clocks: the wall clock (updated_at, lease_until) and, where the clock
 * gives one, the machine's monotonic clock (machine-time.ts), which every process on the file shares (WAL
 * needs them on one machine). The monotonic lease decides whether a claim is held: a wall clock stepped
 * forward past a live holder's lease (NTP, `date -s`) would otherwise free its key to a second attempt,
 * which would apply the effect beside it. The wall lease decides only where the monotonic one cannot: a
 * claim written on another boot (its holder died with it), by older code, or by a clock without one.
 */
export class SqliteLedger implements IdempotencyLedger {
  constructor(private readonly db: Db, private readonly clock: Clock = systemClock, private readonly log?: Logger) {}

  async once<T>(key: string, args: unknown, effect: (signal: AbortSignal) => T | Promise<T>, options: OnceOptions = {}): Promise<T> {
    const leaseMs = leaseMsOf(options);
    const argsHash = hashArgs(args);
    const owner = randomUUID();
    const claimed = immediate(this.db, () => {
      // The effect runs once this claim is written: never on a file no longer at its path (moved-file.ts).
      refuseMovedFile(this.db, true);
      const now = this.clock.now();
      const row = this.row(key);
      // Written by newer code: neither its result nor its claim is this code's to read or take over.
      if (row && isNewer(row)) throw newerLedgerRecord(key, row);
      if (row && row.args_hash !== argsHash) throw new IdempotencyKeyReuseError(key);
      if (row && row.result !== null) return { done: true as const, result: JSON.parse(row.result) as T };
      if (row && row.updated_at > now + CLOCK_STEP_TOLERANCE_MS) rebaseClaim(this.db, key, row, now, this.log);
      // Returned, not thrown: a throw would roll back the claim's rebase.
      // Read before the lease's start: the holder gives up counting from no later than it (heldForMs).
      const claimedAt = processTime(this.clock);
      const machine = this.clock.machineTime?.();
      const leaseLeft = row ? leaseLeftMs(row, now, machine) : 0;
      if (leaseLeft > 0) return { busy: new IdempotencyInProgressError(key, now + leaseLeft, retryAfterMs(now + leaseLeft, now)) };
      const run = this.runOf(key);
      preparedOnce(this.db)(
        `INSERT INTO ledger (key, args_hash, status, result, lease_until, owner, updated_at, format, machine_boot, machine_until, machine_owner)
         VALUES (?, ?, 'in_progress', NULL, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (key) DO UPDATE SET lease_until = excluded.lease_until, owner = excluded.owner, updated_at = excluded.updated_at, format = excluded.format,
           machine_boot = excluded.machine_boot, machine_until = excluded.machine_until, machine_owner = excluded.machine_owner`,
      ).run(key, argsHash, now + leaseMs, owner, now, FORMAT, machine?.boot ?? null, machine ? machine.ms + leaseMs : null, machine ? owner : null);
      return { done: false as const, run, claimedAt };
    });
    if ('busy' in claimed) throw claimed.busy;
    if (claimed.done) return claimed.result;

    let result: T;
    try {
      result = await holdWhileRenewing({
        key, clock: this.clock, leaseMs, effect, onMachine: true, renew: () => this.renew(key, owner, leaseMs),
        heldForMs: heldForMs(leaseMs), claimSentAt: claimed.claimedAt, answersAtOnce: true, ...(options.signal ? { stop: options.signal } : {}),
      });
    } catch (error) {
      // The effect failed: release our claim (only ours) so the step's retry may run it. If this write
      // fails too, the lease runs out instead.
      try { this.release(key, owner); } catch { /* the lease ends anyway */ }
      throw error;
    }
    // The effect happened and its holder lives: a completion refused because another process held the
    // file locked past the busy timeout is tried again, or the step's next attempt would run the effect a
    // second time once the lease ran out. Each try reads the key afresh, so a takeover meanwhile is seen.
    const { json, value, unstorable } = storableResult(key, result);
    for (let tries = 1; ; tries++) {
      try {
        const kept = this.complete(key, argsHash, owner, value as T, json, claimed.run, options.onClaimLost);
        if (unstorable) throw unstorable;
        return kept;
      } catch (error) {
        if (!isBusy(error) || tries >= COMPLETE_TRIES) throw error;
        await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** tries));
      }
    }
  }

  private row(key: string): LedgerRow | undefined {
    return preparedOnce(this.db)('SELECT args_hash, status, result, lease_until, owner, updated_at, format, machine_boot, machine_until, machine_owner FROM ledger WHERE key = ?')
      .get(key) as LedgerRow | undefined;
  }

  /**
   * The run the key is under, as it is at the claim: its number and creation time name this run of the
   * id, not a later run given the id once this one was deleted. Undefined for a key of no run on file.
   */
  private runOf(key: string): RunOnFile | undefined {
    const runId = runOfKey(key);
    if (runId === undefined) return undefined;
    const row = preparedOnce(this.db)('SELECT run_no, created_at FROM runs WHERE run_id = ?').get(runId) as { run_no: number; created_at: number } | undefined;
    return row && { runId, runNo: row.run_no, createdAt: row.created_at };
  }

  /** Whether the run the key was claimed under is still on file: not deleted, nor deleted and started anew. */
  private stands(run: RunOnFile | undefined): boolean {
    return !run || preparedOnce(this.db)('SELECT 1 FROM runs WHERE run_id = ? AND run_no = ? AND created_at = ?').get(run.runId, run.runNo, run.createdAt) !== undefined;
  }

  private renew(key: string, owner: string, leaseMs: number): boolean {
    const now = this.clock.now();
    const machine = this.clock.machineTime?.();
    return preparedOnce(this.db)(
      `UPDATE ledger SET lease_until = ?, updated_at = ?, machine_boot = ?, machine_until = ?, machine_owner = ?
       WHERE key = ? AND owner = ? AND status = 'in_progress'`,
    ).run(now + leaseMs, now, machine?.boot ?? null, machine ? machine.ms + leaseMs : null, machine ? owner : null, key, owner).changes === 1;
  }

  private release(key: string, owner: string): void {
    immediate(this.db, () => {
      const now = this.clock.now();
      // A holder that had lost the key finished the effect meanwhile: the key is completed with its result.
      preparedOnce(this.db)("UPDATE ledger SET status = 'completed', updated_at = ? WHERE key = ? AND owner = ? AND status = 'in_progress' AND result IS NOT NULL")
        .run(now, key, owner);
      preparedOnce(this.db)("DELETE FROM ledger WHERE key = ? AND owner = ? AND status = 'in_progress' AND result IS NULL").run(key, owner);
    });
  }

  /**
   * Records that the effect happened; returns the key's result (the first one on record, one per key).
   * A holder whose claim is gone writes only while the run it claimed under stands: one deleted since
   * (its delete waited for the lease to run out) is gone with its records, and a record written back
   * would bring them back, and give a new run of the id this effect's result for its own.
   */
  private complete<T>(key: string, argsHash: string, owner: string, result: T, json: string, run: RunOnFile | undefined, onClaimLost?: () => void): T {
    let lost = false;
    const kept = immediate(this.db, () => {
      lost = false;
      const now = this.clock.now();
      const row = this.row(key);
      if (!row) {
        // Nobody holds the key (it was taken over, then released): the effect happened all the same.
        lost = true;
        if (!this.stands(run)) return result;
        preparedOnce(this.db)("INSERT INTO ledger (key, args_hash, status, result, lease_until, owner, updated_at, format) VALUES (?, ?, 'completed', ?, ?, ?, ?, ?)")
          .run(key, argsHash, json, now, owner, now, FORMAT);
        return result;
      }
      // Newer code took the key over meanwhile: its record is not ours to change.
      if (row.args_hash !== argsHash || isNewer(row)) {
        lost = row.owner !== owner;
        return result;
      }
      if (row.result !== null) {
        if (row.owner === owner) preparedOnce(this.db)("UPDATE ledger SET status = 'completed', updated_at = ? WHERE key = ?").run(now, key);
        else lost = true;
        return JSON.parse(row.result) as T;
      }
      if (row.owner === owner) {
        preparedOnce(this.db)("UPDATE ledger SET status = 'completed', result = ?, updated_at = ? WHERE key = ?").run(json, now, key);
        return result;
      }
      // Another attempt holds the key now: leave its claim as it is, and put our result on record so that
      // neither its failure nor its death lets the effect run a third time.
      lost = true;
      if (!this.stands(run)) return result;
      preparedOnce(this.db)('UPDATE ledger SET result = ?, updated_at = ? WHERE key = ?').run(json, now, key);
      return result;
    });
    // Told after the transaction: a callback that throws cannot undo the record.
    if (lost) onClaimLost?.();
    return kept;
  }
}

/**
 * A claim written after now (clock-step.ts): the clock stepped back since, and its lease, read as it
 * stands, held the key for the step more (an hour back, a dead holder's key blocked an hour). Its lease
 * runs again from now, as long as it was written for (each claim and renewal writes both times), so no
 * live holder's claim ends sooner than it would have; the holder's next renewal writes it on the new
 * clock anyway. Written in the caller's transaction, so the next reader does not count it again.
 */
function rebaseClaim(db: Db, key: string, row: LedgerRow, now: number, log: Logger | undefined): void {
  const leaseMs = Math.min(MAX_LEASE_MS, Math.max(0, row.lease_until - row.updated_at));
  const stepMs = row.updated_at - now;
  row.lease_until = Math.min(row.lease_until, now + leaseMs);
  row.updated_at = now;
  preparedOnce(db)('UPDATE ledger SET lease_until = ?, updated_at = ? WHERE key = ?').run(row.lease_until, now, key);
  warnClockStep(log, stepMs, `the lease on idempotency key ${key}`);
}

/** A run as the ledger found it at a claim under its key (runOf). */
interface RunOnFile { runId: string; runNo: number; createdAt: number }

function isNewer(row: LedgerRow): boolean {
  return (row.format ?? 1) > RECORD_FORMATS.ledger;
}

function newerLedgerRecord(key: string, row: LedgerRow): NewerFormatError {
  return new NewerFormatError('', `the idempotency record of ${key}`, 'ledger', row.format ?? 1, RECORD_FORMATS.ledger);
}

export function hashArgs(args: unknown): string {
  return createHash('sha256').update(canonicalJson(args ?? null)).digest('hex');
}
