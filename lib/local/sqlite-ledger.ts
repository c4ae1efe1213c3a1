import { createHash } from 'node:crypto';
import { canonicalJson } from '../core/canonical-json.ts';
import { IdempotencyInProgressError, IdempotencyKeyReuseError } from '../core/errors.ts';
import type { Clock, IdempotencyLedger } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { immediate, type Db } from './database.ts';

export const DEFAULT_LEASE_MS = 60_000;

interface LedgerRow { args_hash: string; status: 'in_progress' | 'completed'; result: string | null; lease_until: number }

/**
 * Apply-once records, like Powertools' idempotency utility: claim the key with an in-progress lease, run
 * the effect, store its result. A retry returns the stored result; a reused key with other arguments is
 * refused; a lease left by a crashed attempt expires so the effect can be tried again.
 */
export class SqliteLedger implements IdempotencyLedger {
  constructor(private readonly db: Db, private readonly clock: Clock = systemClock) {}

  async once<T>(key: string, args: unknown, effect: () => Promise<T>, options: { leaseMs?: number } = {}): Promise<T> {
    const argsHash = hashArgs(args);
    const claimed = immediate(this.db, () => {
      const now = this.clock.now();
      const row = this.db.prepare('SELECT args_hash, status, result, lease_until FROM ledger WHERE key = ?').get(key) as LedgerRow | undefined;
      if (row && row.args_hash !== argsHash) throw new IdempotencyKeyReuseError(key);
      if (row?.status === 'completed') return { done: true as const, result: JSON.parse(row.result ?? 'null') as T };
      if (row && row.lease_until > now) throw new IdempotencyInProgressError(key);
      this.db.prepare(
        "INSERT INTO ledger (key, args_hash, status, result, lease_until, updated_at) VALUES (?, ?, 'in_progress', NULL, ?, ?) ON CONFLICT (key) DO UPDATE SET lease_until = excluded.lease_until, updated_at = excluded.updated_at",
      ).run(key, argsHash, now + (options.leaseMs ?? DEFAULT_LEASE_MS), now);
      return { done: false as const };
    });
    if (claimed.done) return claimed.result;
    let result: T;
    try {
      result = await effect();
    } catch (error) {
      // The effect failed before completing: release the claim so the step's retry may run it again.
      this.db.prepare("DELETE FROM ledger WHERE key = ? AND status = 'in_progress'").run(key);
      throw error;
    }
    this.db.prepare("UPDATE ledger SET status = 'completed', result = ?, updated_at = ? WHERE key = ?")
      .run(JSON.stringify(result ?? null), this.clock.now(), key);
    return result;
  }
}

export function hashArgs(args: unknown): string {
  return createHash('sha256').update(canonicalJson(args ?? null)).digest('hex');
}
