import { setTimeout as sleep } from 'node:timers/promises';

/** One entry per item of a TransactWriteItems request, in request order. */
export interface CancellationReason {
  Code?: string;
  Message?: string;
  /** The item as it was, when ReturnValuesOnConditionCheckFailure is ALL_OLD (raw attribute values). */
  Item?: Record<string, { S?: string; N?: string }>;
}

export function errorName(error: unknown): string {
  return (error as { name?: string } | undefined)?.name ?? '';
}

export function isConditionalCheckFailed(error: unknown): boolean {
  return errorName(error) === 'ConditionalCheckFailedException';
}

export function cancellationReasons(error: unknown): CancellationReason[] | undefined {
  if (errorName(error) !== 'TransactionCanceledException') return undefined;
  return (error as { CancellationReasons?: CancellationReason[] }).CancellationReasons ?? [];
}

/**
 * Another transaction held one of the items. Not an answer about our condition: the write is simply
 * tried again, and the condition then decides.
 */
export function isTransactionConflict(error: unknown): boolean {
  if (errorName(error) === 'TransactionConflictException') return true;
  const reasons = cancellationReasons(error);
  return !!reasons?.some((r) => r.Code === 'TransactionConflict')
    && !reasons.some((r) => r.Code === 'ConditionalCheckFailed');
}

const CONFLICT_ATTEMPTS = 6;

/** Runs a write, retrying only transaction conflicts (the SDK's retries do not cover them). */
export async function retryConflicts<T>(write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      if (!isTransactionConflict(error) || attempt >= CONFLICT_ATTEMPTS) throw error;
      await sleep(10 * 2 ** attempt + Math.random() * 20);
    }
  }
}

/** A number attribute of a raw item returned with a cancellation reason. */
export function rawNumber(item: CancellationReason['Item'], attribute: string): number | undefined {
  const value = item?.[attribute]?.N;
  return value === undefined ? undefined : Number(value);
}
