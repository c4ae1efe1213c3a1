import { createHash } from 'node:crypto';
import type { RunStatus } from '../core/state.ts';

/**
 * The single DynamoDB table that holds every run, its step records, its checkpoint history and the
 * idempotency ledger. One partition per run, so loading a run is one Query:
 *
 *   pk = run#<runId>   sk = c#0000000007   history row of version 7 (head snapshot, tool, key, worker, bytes);
 *                                          expiresAt = written + retention (DynamoDB TTL)
 *                      sk = h              the run head: latest version, status, step, head JSON, the recorded
 *                                          decision for the next step, the latest checkpoint's metadata, and
 *                                          the next step's restart count (set only by a redelivery).
 *                                          Never expires: history() shows it as the latest checkpoint, so the
 *                                          latest stays visible even after its own c# row has expired.
 *                      sk = p#0000000100   the summary of the condensed block that ends at step 100, written by
 *                                          the checkpoint that condensed it
 *                      sk = s#0000000003   step record 3, written once by the commit that completes step 3
 *                      sk = w#<waitId>     what a wait of the run left outside its partition (no data of
 *                                          its own): the waitevt# item of an event wait, the idempotency
 *                                          keys of an approval wait's emails; written by the commit that
 *                                          saved the run waiting, read by deleteRun, which deletes those too
 *   pk = idem#<key>    sk = i              idempotency ledger record of one side-effecting call
 *   pk = waitevt#<type>\n<key>  sk = <runId>   a run waiting for that event: written by the commit that
 *                                          saved it waiting, read (strongly consistent) when the event comes;
 *                                          left behind when the wait ends (answers check the head) and
 *                                          removed by TTL a day after the wait's deadline
 *   pk = evt#<type>\n<key>  sk = <receivedAt>#<id>   a kept event (early events), TTL after the window
 *
 * Sort order c# < h < p# < s# < w#, so `sk BETWEEN 'h' AND 's#~'` is the full read (head + steps),
 * `sk BETWEEN 'h' AND 'p#~'` then `s#<after the last summary>` on is the bounded resume read, and
 * `sk BETWEEN 'c#' AND 'h'` is the timeline read (history + head). Per step a commit writes the head,
 * one step record and one history row: none of them grows with the run's length.
 */
export const PK = 'pk';
export const SK = 'sk';
export const HEAD_SK = 'h';
export const LEDGER_SK = 'i';
export const TTL_ATTRIBUTE = 'expiresAt';
/** On the head: redeliveries that started the next step at the head's version; removed by every commit. */
export const RESTARTS_ATTRIBUTE = 'restarts';
/**
 * On the head: the run is being deleted (when the delete began). Readers take it for no run; the head is
 * the last item of the run deleted, so the id cannot be created again while the rest is still there.
 */
export const DELETED_ATTRIBUTE = 'deletedAt';
/**
 * On a deleted run's last item, all that is left of it (no data): when its id may be given to a new run.
 * SQS FIFO drops a message whose deduplication id (run and version) it took in the last 5 minutes, and a new
 * run's versions repeat the old run's: started sooner, its messages would be dropped as the old run's, and it
 * would wait for the sweeper's re-drive (15 minutes) at each. Until then a create of the id is refused,
 * saying when; from then the first create removes the mark.
 */
export const FREE_AT_ATTRIBUTE = 'freeAt';
/** SQS FIFO's deduplication window, and a minute for a send that followed the run's last write. */
export const ID_REUSE_AFTER_MS = 6 * 60_000;
/**
 * How long a deleted run's mark stays, its id free or not: as long as the ledger keeps a completed record
 * (DEFAULT_LEDGER_RETENTION_MS). An effect of the run that was still running, its holder frozen past its
 * lease, may finish after the delete: the mark tells its completion that its run is gone, where no item
 * at all looks like a key of no run, and its result would be written back (dynamo-ledger.ts).
 */
export const DELETED_MARK_TTL_MS = 30 * 24 * 3600 * 1000;
/**
 * On the head: when the run was created, on its creator's clock. A ledger holder that lost its claim
 * writes its result only for a run created before its claim's lease could run out, so not for a new run
 * of the id, created after a delete that waited for that lease (dynamo-ledger.ts).
 */
export const CREATED_AT_ATTRIBUTE = 'createdAt';
/** On the head: a cancel asked for (who, when, why), applied at the next step boundary; commits keep it. */
export const CANCEL_ATTRIBUTE = 'cancelRequested';

/** Sparse index on run heads only: list runs by status, newest first, and find stalled ones. */
export const STATUS_INDEX = 'by-status';
export const STATUS_KEY = 'statusKey';
export const STATUS_SORT = 'updatedAt';
/** Attributes copied into the status index: what a RunSummary needs, nothing large. */
export const STATUS_INDEX_ATTRIBUTES = ['runId', 'version', 'status', 'step', 'agent', 'reason'];

/**
 * Every step rewrites the head's updatedAt, so every step also writes the status index. One index
 * partition takes about 1,000 writes a second; spreading each status over a few shards keeps many busy
 * runs from throttling the table through the index. Changing this number orphans listed runs: it is part
 * of the stored format.
 */
export const STATUS_SHARDS = 4;

/**
 * Sparse index on the heads of waiting runs: the scheduled sweeper finds waits whose deadline comes due
 * (no timer sits in the queue for long waits). Sharded like the status index.
 */
export const WAIT_INDEX = 'by-wait-deadline';
export const WAIT_SHARD = 'waitShard';
export const WAIT_DEADLINE = 'waitDeadline';
export const WAIT_INDEX_ATTRIBUTES = ['runId', 'agent', 'version', 'waitId'];

const SEQ_DIGITS = 10;

export const runPk = (runId: string): string => `run#${runId}`;
export const waitEventPk = (type: string, key: string): string => `waitevt#${type}\n${key}`;
export const eventPk = (type: string, key: string): string => `evt#${type}\n${key}`;
export const waitShard = (runId: string): string => `w#${statusShard(runId)}`;
export const waitShards = (): string[] => Array.from({ length: STATUS_SHARDS }, (_, shard) => `w#${shard}`);
export const ledgerPk = (key: string): string => `idem#${key}`;
export const stepSk = (step: number): string => `s#${String(step).padStart(SEQ_DIGITS, '0')}`;
export const summarySk = (lastStep: number): string => `p#${String(lastStep).padStart(SEQ_DIGITS, '0')}`;
export const checkpointSk = (version: number): string => `c#${String(version).padStart(SEQ_DIGITS, '0')}`;
/** On a w# item: the pk of the wait's waitevt# item (its sk is the run id). */
export const WAIT_EVENT = 'waitEvent';
/** On a w# item: the idempotency keys of the wait's approval emails. */
export const WAIT_LEDGER_KEYS = 'ledgerKeys';
/** Outside the full read (h to s#~) and the timeline read (c# to h): only deleteRun reads these. */
export const waitSk = (waitId: string): string => `w#${waitId}`;
export const isWaitSk = (sk: string): boolean => sk.startsWith('w#');

/** The bounds of the resume read and the timeline read (see the layout above). */
export const STEPS_END = 's#~';
export const SUMMARIES_END = 'p#~';
export const HISTORY_START = 'c#';

export function statusShard(runId: string): number {
  return createHash('sha256').update(runId).digest()[0]! % STATUS_SHARDS;
}

export function statusKey(status: RunStatus, runId: string): string {
  return `${status}#${statusShard(runId)}`;
}

export function statusKeys(status: RunStatus): string[] {
  return Array.from({ length: STATUS_SHARDS }, (_, shard) => `${status}#${shard}`);
}

/** The parts of a DescribeTable answer that tell a stepwise table from another application's. */
export interface TableShape {
  KeySchema?: { AttributeName?: string | undefined; KeyType?: string | undefined }[] | undefined;
  GlobalSecondaryIndexes?: { IndexName?: string | undefined }[] | undefined;
}

/**
 * Undefined for a stepwise table, else `table t exists and is not a stepwise table (...)`, saying what keys
 * it has instead. Every stepwise table has had these keys and the status index since the first.
 */
export function notStepwiseTable(tableName: string, table: TableShape | undefined): string | undefined {
  const keys = (table?.KeySchema ?? []).map((k) => `${k.AttributeName} ${k.KeyType}`).join(', ');
  if (keys === `${PK} HASH, ${SK} RANGE` && table?.GlobalSecondaryIndexes?.some((index) => index.IndexName === STATUS_INDEX)) return undefined;
  return `table ${tableName} exists and is not a stepwise table (its keys: ${keys || 'none'}; a stepwise table's are ${PK} HASH, ${SK} RANGE, with the ${STATUS_INDEX} index)`;
}

export function isStepSk(sk: string): boolean {
  return sk.startsWith('s#');
}

export function isCheckpointSk(sk: string): boolean {
  return sk.startsWith('c#');
}
