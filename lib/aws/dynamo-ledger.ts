import { createHash, randomUUID } from 'node:crypto';
import { DeleteCommand, PutCommand, UpdateCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { canonicalJson } from '../core/canonical-json.ts';
import { IdempotencyInProgressError, IdempotencyKeyReuseError } from '../core/errors.ts';
import type { BlobStore, Clock, IdempotencyLedger } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { AttributeSpill } from './attribute-spill.ts';
import { isConditionalCheckFailed } from './dynamo-errors.ts';
import { Expression } from './expression.ts';
import { LEDGER_SK, PK, SK, TTL_ATTRIBUTE, ledgerPk } from './table-layout.ts';

export const DEFAULT_LEASE_MS = 60_000;
/** Completed records outlive any retry of their step by far; then TTL removes them. */
export const DEFAULT_LEDGER_RETENTION_MS = 30 * 24 * 3600 * 1000;

export interface DynamoLedgerOptions {
  doc: DynamoDBDocumentClient;
  tableName: string;
  /** Where results too large for an item go. */
  blobs: BlobStore;
  clock?: Clock;
  retentionMs?: number;
  spillBytes?: number;
}

type RawItem = Record<string, { S?: string; N?: string }>;

/**
 * Apply-once records in DynamoDB, with the semantics of lib/local/sqlite-ledger.ts and the record design
 * of Powertools' idempotency utility (status, expiry, lease, payload hash): claim the key with an
 * in-progress lease (one conditional put), run the effect, store its result. A retry gets the stored
 * result; a reused key with other arguments is refused; a lease left by a crashed attempt expires so the
 * effect can be tried again.
 */
export class DynamoLedger implements IdempotencyLedger {
  private readonly spill: AttributeSpill;

  constructor(private readonly options: DynamoLedgerOptions) {
    this.spill = new AttributeSpill(options.blobs, options.spillBytes);
  }

  private get now(): number {
    return (this.options.clock ?? systemClock).now();
  }

  async once<T>(key: string, args: unknown, effect: () => Promise<T>, options: { leaseMs?: number } = {}): Promise<T> {
    const argsHash = hashArgs(args);
    const token = randomUUID();
    const now = this.now;
    const itemKey = { [PK]: ledgerPk(key), [SK]: LEDGER_SK };
    const claim = new Expression();
    // The claim succeeds when nobody holds the key, when the record outlived its retention (TTL has not
    // swept it yet), or when an attempt with the same arguments crashed and its lease ran out. Otherwise
    // the old record comes back with the failure and says why: completed (return its result), other
    // arguments (refuse), or a live lease (someone is applying it now).
    const condition = [
      `attribute_not_exists(${claim.name(PK)})`,
      `${claim.name(TTL_ATTRIBUTE)} < ${claim.value(now / 1000)}`,
      `(${claim.name('status')} = ${claim.value('in_progress')} AND ${claim.name('leaseUntil')} < ${claim.value(now)} AND ${claim.name('argsHash')} = ${claim.value(argsHash)})`,
    ].join(' OR ');
    try {
      await this.options.doc.send(new PutCommand({
        TableName: this.options.tableName,
        Item: {
          ...itemKey, status: 'in_progress', argsHash, token, leaseUntil: now + (options.leaseMs ?? DEFAULT_LEASE_MS),
          updatedAt: now, [TTL_ATTRIBUTE]: this.expiresAt(now),
        },
        ConditionExpression: condition, ...claim.params(), ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }));
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const old = (error as { Item?: RawItem }).Item ?? {};
      if (old.argsHash?.S !== argsHash) throw new IdempotencyKeyReuseError(key);
      if (old.status?.S === 'completed') return this.storedResult<T>(old);
      throw new IdempotencyInProgressError(key);
    }

    let result: T;
    try {
      result = await effect();
    } catch (error) {
      // The effect failed before completing: release our claim (and only ours) so a retry may run it.
      const release = new Expression();
      await this.options.doc.send(new DeleteCommand({
        TableName: this.options.tableName, Key: itemKey,
        ConditionExpression: `${release.name('token')} = ${release.value(token)}`, ...release.params(),
      })).catch(() => undefined);
      throw error;
    }

    const complete = new Expression();
    const stored = await this.spill.keep('result', JSON.stringify(result ?? null));
    try {
      await this.options.doc.send(new UpdateCommand({
        TableName: this.options.tableName, Key: itemKey,
        UpdateExpression: complete.update({ status: 'completed', ...stored, updatedAt: this.now, [TTL_ATTRIBUTE]: this.expiresAt(this.now) }, ['leaseUntil', 'token']),
        // Only the holder of the claim completes it. If our lease ran out and another attempt took the key
        // over, that attempt owns the record now; the effect has happened either way, so return its result.
        ConditionExpression: `${complete.name('token')} = ${complete.value(token)}`, ...complete.params(),
      }));
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
    }
    return result;
  }

  private async storedResult<T>(raw: RawItem): Promise<T> {
    const item = { result: raw.result?.S, resultRef: raw.resultRef?.S };
    return JSON.parse((await this.spill.restore(item, 'result')) ?? 'null') as T;
  }

  private expiresAt(now: number): number {
    return Math.ceil((now + (this.options.retentionMs ?? DEFAULT_LEDGER_RETENTION_MS)) / 1000);
  }
}

export function hashArgs(args: unknown): string {
  return createHash('sha256').update(canonicalJson(args ?? null)).digest('hex');
}
