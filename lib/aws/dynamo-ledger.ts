import { createHash, randomUUID } from 'node:crypto';
import { DeleteCommand, PutCommand, TransactWriteCommand, UpdateCommand, type DynamoDBDocumentClient, type TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { canonicalJson } from '../core/canonical-json.ts';
import { BlobRefusedError, IdempotencyInProgressError, IdempotencyKeyReuseError, NewerFormatError, PermanentError } from '../core/errors.ts';
import { runOfKey } from '../core/keys.ts';
import { storableResult } from '../core/once-result.ts';
import { RECORD_FORMATS } from '../core/state.ts';
import { LEASE_MARGIN_MS, leaseMsOf, retryAfterMs } from '../core/lease.ts';
import { holdWhileRenewing, processTime } from '../lease-renewal.ts';
import type { BlobStore, Clock, IdempotencyLedger, OnceOptions } from '../ports.ts';
import { monotonicOn, sleepOn, systemClock } from '../ports.ts';
import { AttributeSpill } from './attribute-spill.ts';
import { ClaimSightings, heldForMs, holderLeaseMs, watchMs, type Sighting } from './claim-sightings.ts';
import { cancellationReasons, isConditionalCheckFailed } from './dynamo-errors.ts';
import { Expression } from './expression.ts';
import { CREATED_AT_ATTRIBUTE, DELETED_ATTRIBUTE, HEAD_SK, LEDGER_SK, PK, SK, TTL_ATTRIBUTE, ledgerPk, runPk } from './table-layout.ts';

export { DEFAULT_LEASE_MS } from '../core/lease.ts';
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
 * The record format this code writes: absent while it is 1, so items are as they always were. A claim's
 * `leaseRev` needs no new format: older code ignores it (its put replaces the item, its renewal leaves a
 * stale rev but a new lease), and a claim older code wrote has none, which is one more value to watch.
 */
const FORMAT: { formatVersion?: number } = RECORD_FORMATS.ledger > 1 ? { formatVersion: RECORD_FORMATS.ledger } : {};
type Key = Record<string, string>;

const IN_PROGRESS = 'in_progress';
/**
 * A completion that keeps losing races gives up after this many tries: the effect's result is returned
 * anyway. One refused by DynamoDB this many times in a row throws.
 */
const COMPLETE_TRIES = 5;

/**
 * Apply-once records in DynamoDB, with the semantics of lib/local/sqlite-ledger.ts and the record design
 * of Powertools' idempotency utility (status, expiry, lease, payload hash): claim the key with an
 * in-progress lease (one conditional put), run the effect while renewing the lease, store its result. A
 * retry gets the stored result; a reused key with other arguments is refused; the lease of a claim whose
 * holder died runs out so the effect can be tried again, once the contender has seen, on its own time,
 * that nobody renews it (claim).
 *
 * Every claim carries its owner's token and every later write is conditional on it. A holder that lost
 * its claim still applied its effect, so its completion puts its result on record without touching the
 * new owner's claim: a result on record means the effect happened, and no later attempt runs it again.
 *
 * The SDK retries a write whose answer was lost (a 500, a timeout) although its first try may have been
 * applied; each write here reads such a retry's condition failure as what it is: the old item returned
 * with it carries our own token (a claim) or the result on record (a completion).
 */
export class DynamoLedger implements IdempotencyLedger {
  private readonly spill: AttributeSpill;
  private readonly sightings = new ClaimSightings();

  constructor(private readonly options: DynamoLedgerOptions) {
    this.spill = new AttributeSpill(options.blobs, options.spillBytes);
  }

  private get clock(): Clock {
    return this.options.clock ?? systemClock;
  }

  private get now(): number {
    return this.clock.now();
  }

  async once<T>(key: string, args: unknown, effect: (signal: AbortSignal) => T | Promise<T>, options: OnceOptions = {}): Promise<T> {
    const leaseMs = leaseMsOf(options);
    const argsHash = hashArgs(args);
    const token = randomUUID();
    const itemKey = { [PK]: ledgerPk(key), [SK]: LEDGER_SK };
    // Read before the claim: a run created past this claim's lease is a new run of the id (runStands).
    const run = runOfKey(key);
    const claimedBy = run === undefined ? undefined : { runId: run, before: this.now + leaseMs };
    const claimed = await this.claim<T>(key, itemKey, argsHash, token, leaseMs, options.signal);
    if (claimed.done) return claimed.result;

    let result: T;
    try {
      result = await holdWhileRenewing({
        key, clock: this.clock, leaseMs, effect, renew: () => this.renew(itemKey, token, leaseMs),
        heldForMs: heldForMs(leaseMs), claimSentAt: claimed.sentAt, ...(options.signal ? { stop: options.signal } : {}),
      });
    } catch (error) {
      // The effect failed: release our claim (only ours) so a retry may run it. If this write fails too,
      // the lease runs out instead.
      await this.release(itemKey, token).catch(() => undefined);
      throw error;
    }
    const { json, value, unstorable } = storableResult(key, result);
    let kept: T;
    try {
      kept = await this.complete(itemKey, argsHash, token, value as T, json, options.onClaimLost, claimedBy);
    } catch (error) {
      // A result over the item's limit that S3 refused to keep (lib/aws/attribute-spill.ts): the effect ran
      // all the same. Left in progress, the key's lease ran out and each later try applied the effect
      // again, up to the run's last try. Completed as null instead, as a result JSON cannot hold is.
      if (!(error instanceof BlobRefusedError)) throw error;
      await this.complete(itemKey, argsHash, token, null as T, 'null', options.onClaimLost, claimedBy);
      throw new PermanentError(`the effect under ${key} ran, but its result (${Buffer.byteLength(json)} bytes, over what an item holds) could not be kept: ${error.message}; it is kept as null and will not run again under this key: mend the bucket, or return less from the effect`, { cause: error });
    }
    if (unstorable) throw unstorable;
    return kept;
  }

  /**
   * Claims the key, or finds its result. A claim of another attempt is never taken over on a comparison
   * of clocks alone (the AWS DynamoDB Lock Client's record version number is the model): machines share
   * no clock, and a contender whose wall clock runs a minute ahead (a VM resumed, `date -s`, NTP stepping)
   * read a live holder's lease as run out, took the key and applied the effect beside it. A lease its wall
   * clock says ran out is only
   * a reason to look closer: the contender watches the claim on its own monotonic time for the window
   * (watchMs), and takes it over only with a write conditional on the holder's token and rev being what it
   * saw. A live holder writes a fresh rev at every renewal, so its claim moves and the takeover fails. A
   * lease its clock reads as live is waited for, coming back within a lease, but only until the claim has
   * been seen unchanged for the window: then it is a dead holder's, whatever its lease says. A holder whose
   * clock ran minutes ahead wrote a lease minutes long, and the key of one that died stayed blocked until
   * every other worker's clock had caught up (a run left at its step for that long).
   */
  private async claim<T>(key: string, itemKey: Key, argsHash: string, token: string, leaseMs: number, signal?: AbortSignal): Promise<{ done: true; result: T } | { done: false; sentAt: number }> {
    const first = await this.put<T>(key, itemKey, argsHash, token, leaseMs);
    if (first.held === undefined) return first;
    const { sighting, holderLeaseMs: holderLease } = first.held;
    const watched = this.sightings.note(key, sighting, monotonicOn(this.clock));
    const window = watchMs(holderLease);
    if (sighting.leaseUntil >= this.now && watched < window) throw inProgress(key, sighting.leaseUntil, this.now, holderLease);
    // The wait is a step's time: 41 s for the default 60 s lease, well within a worker Lambda's 6 minutes
    // (the construct's default, less DEFAULT_RESERVE_MS) and its queue's visibility (6 times that). A lease
    // so long its window outlasts the invocation is cut by the try's signal: the try ends without the key,
    // and a retry in the same container resumes the watch where it stopped (ClaimSightings).
    if (watched < window) {
      await sleepOn(this.clock, window - watched, signal);
      if (signal?.aborted) {
        const left = window - this.sightings.note(key, sighting, monotonicOn(this.clock));
        throw new IdempotencyInProgressError(key, sighting.leaseUntil, Math.max(0, left));
      }
    }
    // Unchanged for the window: dead, even where a clock stepped back meanwhile reads its lease as live.
    const second = await this.put<T>(key, itemKey, argsHash, token, leaseMs, sighting);
    if (second.held === undefined) {
      this.sightings.forget(key);
      return second;
    }
    // The claim moved while we watched: its holder lives (or another contender took it over).
    this.sightings.note(key, second.held.sighting, monotonicOn(this.clock));
    throw inProgress(key, second.held.sighting.leaseUntil, this.now, second.held.holderLeaseMs);
  }

  /**
   * One claim write: of a free key (none, or past its retention), or with `seen` the takeover of that very
   * claim, unchanged since it was seen. `held`: another attempt's claim, as the failed write returned it.
   * `sentAt`: this process's time before the write was sent, from when a claim it made is its own.
   */
  private async put<T>(key: string, itemKey: Key, argsHash: string, token: string, leaseMs: number, seen?: Sighting): Promise<{ done: true; result: T; held?: undefined } | { done: false; sentAt: number; held?: undefined } | { done: false; held: { sighting: Sighting; holderLeaseMs: number } }> {
    const now = this.now;
    const sentAt = processTime(this.clock);
    const claim = new Expression();
    // The claim succeeds when nobody holds the key, when the record outlived its retention (TTL has not
    // swept it yet), or when it is the dead attempt's claim we watched, with the same arguments and no
    // result on record. Otherwise the old record comes back with the failure and says why.
    // A dead claim of a newer format is not taken over: newer code wrote it.
    const condition = [
      `attribute_not_exists(${claim.name(PK)})`,
      `${claim.name(TTL_ATTRIBUTE)} < ${claim.value(now / 1000)}`,
      ...(seen ? [`(${claim.name('status')} = ${claim.value(IN_PROGRESS)} AND ${sameClaim(claim, seen)} AND ${claim.name('argsHash')} = ${claim.value(argsHash)} AND ${noResult(claim)} AND ${knownFormat(claim)})`] : []),
    ].join(' OR ');
    try {
      await this.options.doc.send(new PutCommand({
        TableName: this.options.tableName,
        Item: { ...itemKey, status: IN_PROGRESS, argsHash, token, leaseRev: randomUUID(), leaseUntil: now + leaseMs, updatedAt: now, [TTL_ATTRIBUTE]: this.expiresAt(now), ...FORMAT },
        ConditionExpression: condition, ...claim.params(), ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }));
      return { done: false, sentAt };
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const old = oldItem(error);
      // The SDK retried this very put after its first try was applied: the claim is ours.
      if (old.token?.S === token) return { done: false, sentAt };
      // Written by newer code: neither its result nor its claim is this code's to read.
      if (formatOfItem(old) > RECORD_FORMATS.ledger) {
        throw new NewerFormatError('', `the idempotency record of ${key}`, 'ledger', formatOfItem(old), RECORD_FORMATS.ledger);
      }
      if (old.argsHash?.S !== argsHash) throw new IdempotencyKeyReuseError(key);
      // A result on record: completed, or finished by a holder that had lost its claim.
      if (hasResult(old)) return { done: true, result: await this.storedResult<T>(old) };
      const leaseUntil = Number(old.leaseUntil?.N ?? now);
      return {
        done: false,
        held: { sighting: { token: old.token?.S, rev: old.leaseRev?.S, leaseUntil }, holderLeaseMs: holderLeaseMs(leaseUntil, Number(old.updatedAt?.N), leaseMs) },
      };
    }
  }

  /** False when the claim is no longer ours. A retried renewal whose first try was applied still holds. */
  private async renew(itemKey: Key, token: string, leaseMs: number): Promise<boolean> {
    const now = this.now;
    const renew = new Expression();
    try {
      await this.options.doc.send(new UpdateCommand({
        TableName: this.options.tableName, Key: itemKey,
        UpdateExpression: renew.update({ leaseUntil: now + leaseMs, leaseRev: randomUUID(), updatedAt: now }),
        ConditionExpression: ownClaim(renew, token), ...renew.params(),
      }));
      return true;
    } catch (error) {
      if (isConditionalCheckFailed(error)) return false;
      throw error;
    }
  }

  private async release(itemKey: Key, token: string): Promise<void> {
    const release = new Expression();
    try {
      await this.options.doc.send(new DeleteCommand({
        TableName: this.options.tableName, Key: itemKey,
        ConditionExpression: `${ownClaim(release, token)} AND ${noResult(release)}`, ...release.params(),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }));
    } catch (error) {
      // Gone already (a retried delete whose first try was applied), or not ours: nothing to do.
      if (!isConditionalCheckFailed(error)) throw error;
      const old = oldItem(error);
      // A holder that had lost the key finished the effect meanwhile: the key is completed with its result.
      if (old.token?.S === token && old.status?.S === IN_PROGRESS && hasResult(old)) await this.finish(itemKey, token);
    }
  }

  /**
   * Records that the effect happened; returns the key's result (the first one on record, one per key).
   * A holder whose claim is gone writes only while the run it claimed under stands (runStands): one
   * deleted since is gone with its records, and a record written back would give a new run of the id
   * this effect's result for its own.
   */
  private async complete<T>(itemKey: Key, argsHash: string, token: string, result: T, json: string, onClaimLost?: () => void, run?: ClaimedBy): Promise<T> {
    const stored = await this.spill.keep('result', json);
    for (let tries = 0; tries < COMPLETE_TRIES; tries++) {
      const now = this.now;
      const complete = new Expression();
      try {
        await this.options.doc.send(new UpdateCommand({
          TableName: this.options.tableName, Key: itemKey,
          UpdateExpression: complete.update({ status: 'completed', ...stored, updatedAt: now, [TTL_ATTRIBUTE]: this.expiresAt(now) }, ['leaseUntil']),
          ConditionExpression: `${ownClaim(complete, token)} AND ${noResult(complete)}`, ...complete.params(),
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }));
        return result;
      } catch (error) {
        // The effect happened and its holder lives: a completion refused for a while (throttled past the
        // SDK's retries) is tried again, or the step's next attempt would run the effect a second time
        // once the lease ran out. Every try is conditional on the claim, so a takeover meanwhile is seen.
        if (!isConditionalCheckFailed(error)) {
          if (tries === COMPLETE_TRIES - 1) throw error;
          continue;
        }
        const old = oldItem(error);
        if (!old.argsHash) {
          // Nobody holds the key (it was taken over, then released): the effect happened all the same.
          if (await this.putCompleted(itemKey, argsHash, token, stored, now, run)) return lostClaim(result, onClaimLost);
          continue;
        }
        // Newer code took the key over meanwhile: its record is not ours to change.
        if (old.argsHash.S !== argsHash || formatOfItem(old) > RECORD_FORMATS.ledger) return old.token?.S === token ? result : lostClaim(result, onClaimLost);
        if (hasResult(old)) {
          // Ours if the SDK retried a completion that was applied; another holder's otherwise.
          if (old.token?.S === token) {
            if (old.status?.S === IN_PROGRESS) await this.finish(itemKey, token);
            return this.storedResult<T>(old);
          }
          return lostClaim(await this.storedResult<T>(old), onClaimLost);
        }
        // Another attempt holds the key now: leave its claim as it is, and put our result on record so
        // that neither its failure nor its death lets the effect run a third time.
        if (old.status?.S === IN_PROGRESS && old.token?.S && await this.putResultOn(itemKey, old.token.S, stored, now, run)) return lostClaim(result, onClaimLost);
      }
    }
    // Every try met another holder's write: the claim is not ours.
    return lostClaim(result, onClaimLost);
  }

  /** True once settled: written, or not to be (its run is gone: runStands). */
  private async putCompleted(itemKey: Key, argsHash: string, token: string, stored: Record<string, string | undefined>, now: number, run?: ClaimedBy): Promise<boolean> {
    const put = new Expression();
    const write = {
      TableName: this.options.tableName,
      Item: { ...itemKey, status: 'completed', argsHash, token, ...stored, updatedAt: now, [TTL_ATTRIBUTE]: this.expiresAt(now), ...FORMAT },
      ConditionExpression: `attribute_not_exists(${put.name(PK)})`, ...put.params(),
    };
    if (run) return this.ifRunStands(run, { Put: write });
    try {
      await this.options.doc.send(new PutCommand(write));
      return true;
    } catch (error) {
      if (isConditionalCheckFailed(error)) return false;
      throw error;
    }
  }

  /** True once settled: written, or not to be (its run is gone: runStands). */
  private async putResultOn(itemKey: Key, holder: string, stored: Record<string, string | undefined>, now: number, run?: ClaimedBy): Promise<boolean> {
    const put = new Expression();
    const write = {
      TableName: this.options.tableName, Key: itemKey,
      UpdateExpression: put.update({ ...stored, updatedAt: now }),
      ConditionExpression: `${ownClaim(put, holder)} AND ${noResult(put)}`, ...put.params(),
    };
    if (run) return this.ifRunStands(run, { Update: write });
    try {
      await this.options.doc.send(new UpdateCommand(write));
      return true;
    } catch (error) {
      if (isConditionalCheckFailed(error)) return false;
      throw error;
    }
  }

  /**
   * A write of a holder that lost its claim, made with a check that the run it claimed under stands
   * (runStands), in one transaction: true once settled (written, or its run gone), false when the
   * write's own condition failed. The SDK gives the transaction a token, so a retry of one applied is
   * applied once.
   */
  private async ifRunStands(run: ClaimedBy, write: NonNullable<TransactWriteCommandInput['TransactItems']>[number]): Promise<boolean> {
    const check = new Expression();
    try {
      await this.options.doc.send(new TransactWriteCommand({
        TransactItems: [
          { ConditionCheck: { TableName: this.options.tableName, Key: { [PK]: runPk(run.runId), [SK]: HEAD_SK }, ConditionExpression: runStands(check, run.before), ...check.params() } },
          write,
        ],
      }));
      return true;
    } catch (error) {
      const reasons = cancellationReasons(error);
      if (!reasons) throw error;
      if (reasons[0]?.Code === 'ConditionalCheckFailed') return true;
      // Its own condition failed, or another write held one of the items: the completion reads the key again.
      if (reasons[1]?.Code === 'ConditionalCheckFailed' || reasons.some((r) => r.Code === 'TransactionConflict')) return false;
      throw error;
    }
  }

  /** Our claim carries a result another holder put there: it becomes the completed record. */
  private async finish(itemKey: Key, token: string): Promise<void> {
    const now = this.now;
    const finish = new Expression();
    await this.options.doc.send(new UpdateCommand({
      TableName: this.options.tableName, Key: itemKey,
      UpdateExpression: finish.update({ status: 'completed', updatedAt: now, [TTL_ATTRIBUTE]: this.expiresAt(now) }, ['leaseUntil']),
      ConditionExpression: ownClaim(finish, token), ...finish.params(),
    })).catch((error: unknown) => { if (!isConditionalCheckFailed(error)) throw error; });
  }

  private async storedResult<T>(raw: RawItem): Promise<T> {
    const item = { result: raw.result?.S, resultRef: raw.resultRef?.S };
    return JSON.parse((await this.spill.restore(item, 'result')) ?? 'null') as T;
  }

  private expiresAt(now: number): number {
    return Math.ceil((now + (this.options.retentionMs ?? DEFAULT_LEDGER_RETENTION_MS)) / 1000);
  }
}

/** The result of an effect that finished after its claim was lost, told to the holder's caller. */
function lostClaim<T>(result: T, onClaimLost: (() => void) | undefined): T {
  onClaimLost?.();
  return result;
}

function oldItem(error: unknown): RawItem {
  return (error as { Item?: RawItem }).Item ?? {};
}

function formatOfItem(item: RawItem): number {
  return item.formatVersion?.N !== undefined ? Number(item.formatVersion.N) : 1;
}

function knownFormat(e: Expression): string {
  return `(attribute_not_exists(${e.name('formatVersion')}) OR ${e.name('formatVersion')} <= ${e.value(RECORD_FORMATS.ledger)})`;
}

function hasResult(item: RawItem): boolean {
  return item.result?.S !== undefined || item.resultRef?.S !== undefined;
}

/** A claim still as `seen`: no renewal (a fresh rev, or older code's new lease) and no other owner since. */
function sameClaim(e: Expression, seen: Sighting): string {
  const is = (attribute: string, value: string | number | undefined) =>
    value === undefined ? `attribute_not_exists(${e.name(attribute)})` : `${e.name(attribute)} = ${e.value(value)}`;
  return `${is('token', seen.token)} AND ${is('leaseRev', seen.rev)} AND ${is('leaseUntil', seen.leaseUntil)}`;
}

/**
 * Come back after the holder's lease as this clock reads it, but never later than one lease of the holder's
 * and the margin: a live holder renews within that, and a contender whose clock runs an hour behind the
 * holder's read its lease as an hour long and parked the step's message (and, on a FIFO queue, every later
 * message of its run) for that hour.
 */
function inProgress(key: string, leaseUntil: number, now: number, holderLease: number): IdempotencyInProgressError {
  return new IdempotencyInProgressError(key, leaseUntil, Math.min(retryAfterMs(leaseUntil, now), holderLease + LEASE_MARGIN_MS));
}

/** The run a key is under, as its holder claimed it: created before `before` (the claim's lease end). */
interface ClaimedBy { runId: string; before: number }

/**
 * The run a holder claimed its key under is still there: no delete's mark at its head, and created before
 * the claim's lease could run out; a delete waits for that (refuseLiveClaims), so a run created later is a
 * new run of the id. A head written before heads carried their creation time passes; no head at all is a
 * key of no run (the ledger used alone): a deleted run leaves its mark (DELETED_MARK_TTL_MS).
 */
function runStands(e: Expression, before: number): string {
  return `attribute_not_exists(${e.name(PK)}) OR (attribute_not_exists(${e.name(DELETED_ATTRIBUTE)}) AND (attribute_not_exists(${e.name(CREATED_AT_ATTRIBUTE)}) OR ${e.name(CREATED_AT_ATTRIBUTE)} < ${e.value(before)}))`;
}

function ownClaim(e: Expression, token: string): string {
  return `${e.name('token')} = ${e.value(token)} AND ${e.name('status')} = ${e.value(IN_PROGRESS)}`;
}

function noResult(e: Expression): string {
  return `attribute_not_exists(${e.name('result')}) AND attribute_not_exists(${e.name('resultRef')})`;
}

export function hashArgs(args: unknown): string {
  return createHash('sha256').update(canonicalJson(args ?? null)).digest('hex');
}
