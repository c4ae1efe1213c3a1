import { randomBytes } from 'node:crypto';
import {
  BatchGetCommand, BatchWriteCommand, DeleteCommand, GetCommand, PutCommand, QueryCommand, TransactWriteCommand, UpdateCommand,
  type DynamoDBDocumentClient, type QueryCommandInput, type TransactWriteCommandInput,
} from '@aws-sdk/lib-dynamodb';
import type { StoredCheckpoint } from '../core/codec.ts';
import { encodeDecision, encodeHead, encodeStep, encodeSummary, unreadableText } from '../core/codec.ts';
import { CONDENSE_BLOCK, condensedBlocks } from '../core/condense.ts';
import { excerpt } from '../core/prompt.ts';
import { EffectStillRunningError, PermanentError, RunIdInUseError, StaleVersionError } from '../core/errors.ts';
import { retryAfterMs } from '../core/lease.ts';
import { DEFAULT_RETENTION_MS } from '../core/retention.ts';
import { byDeadline, byListOrder, isAfter } from '../core/run-order.ts';
import { approvalEmailKey, idempotencyKey } from '../core/keys.ts';
import { RUN_STATUSES, TERMINAL_STATUSES, isTerminal, type Decision, type RunState, type RunStatus, type StepRecord, type WaitRecord } from '../core/state.ts';
import type {
  BlobStore, CheckpointInfo, CheckpointStore, CheckpointWrite, Clock, CommitResult, HistoryPage, ListRunsQuery, OpenWait, RunSummary, StepRange, WaitPosition, WriteMeta,
} from '../ports.ts';
import { systemClock } from '../ports.ts';
import { DEFAULT_RETENTION_DAYS } from '../settings.ts';
import { AttributeSpill, MissingSpilledValueError } from './attribute-spill.ts';
import { cancellationReasons, isConditionalCheckFailed, rawNumber, retryConflicts, type CancellationReason } from './dynamo-errors.ts';
import { Expression } from './expression.ts';
import { DYNAMODB_ITEM_LIMIT, itemSize } from './item-size.ts';
import {
  CANCEL_ATTRIBUTE, CREATED_AT_ATTRIBUTE, DELETED_ATTRIBUTE, DELETED_MARK_TTL_MS, FREE_AT_ATTRIBUTE, HEAD_SK, ID_REUSE_AFTER_MS, LEDGER_SK, HISTORY_START, PK, RESTARTS_ATTRIBUTE, SK, STATUS_INDEX, STATUS_KEY, STATUS_SORT, STEPS_END, SUMMARIES_END,
  TTL_ATTRIBUTE, WAIT_DEADLINE, WAIT_EVENT, WAIT_INDEX, WAIT_LEDGER_KEYS, WAIT_SHARD,
  checkpointSk, isCheckpointSk, isStepSk, isWaitSk, ledgerPk, runPk, statusKey, statusKeys, stepSk, summarySk, waitEventPk, waitShard, waitShards, waitSk,
} from './table-layout.ts';

export { DEFAULT_RETENTION_MS } from '../core/retention.ts';
/**
 * A create carries at most this many step records in its one transaction (DynamoDB takes 100 items and
 * 4 MB; records are at most 64 KB each after spilling). A fork from a later step writes its records first.
 */
const CREATE_INLINE_STEPS = 50;
const CREATE_PUT_CONCURRENCY = 10;
/** BatchWriteItem's most items a call, and the tries of the items it leaves unprocessed. */
const BATCH_WRITE_ITEMS = 25;
const BATCH_WRITE_TRIES = 8;
/** BatchGetItem's most keys a call. */
const BATCH_GET_ITEMS = 100;
/** The condition of a write that creates an item: heads of new runs, step records, history rows. */
const ABSENT = { ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': PK } } as const;
/** The reason copied into the head (for listings); the full text stays in the head JSON. */
const REASON_ATTRIBUTE_LIMIT = 1000;

/**
 * The reason as listings show it: an excerpt, which never cuts an emoji in half. A slice at 1,000 UTF-16
 * units could, and a listing's JSON then held a lone surrogate (a client's print of it fails, the
 * inspector showed U+FFFD).
 */
const listedReason = (reason: string): string => excerpt(reason, REASON_ATTRIBUTE_LIMIT);

export interface DynamoCheckpointStoreOptions {
  doc: DynamoDBDocumentClient;
  tableName: string;
  /** Where attribute values too large for an item go (the S3 blob store in production). */
  blobs: BlobStore;
  clock?: Clock;
  /** History rows older than this expire through DynamoDB TTL; the latest checkpoint never does. */
  retentionMs?: number;
  /** Attribute values above this many bytes are spilled to the blob store. */
  spillBytes?: number;
}

type Item = Record<string, unknown>;
type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

/**
 * Checkpoints in DynamoDB (layout in table-layout.ts). Every write that moves a run is ONE
 * TransactWriteItems: the head update fenced on the version, the new step record and the new history row
 * succeed or fail together, so a crash or a lost race can never leave a step without its checkpoint or a
 * gap in the history. Loading a run is one strongly consistent Query over its partition; a worker that
 * holds the run's earlier steps reads only the head and the steps it lacks (load with afterStep); a resume
 * that holds none reads the block summaries and the records after them (load with recent).
 */
export class DynamoCheckpointStore implements CheckpointStore {
  private readonly spill: AttributeSpill;

  constructor(private readonly options: DynamoCheckpointStoreOptions) {
    this.spill = new AttributeSpill(options.blobs, options.spillBytes);
  }

  private get table(): string {
    return this.options.tableName;
  }

  private get now(): number {
    return (this.options.clock ?? systemClock).now();
  }

  private get retentionMs(): number {
    return this.options.retentionMs ?? DEFAULT_RETENTION_MS;
  }

  async create(state: RunState, meta: WriteMeta & Pick<CheckpointWrite, 'queue'>, reused = false): Promise<{ created: boolean; version: number; bytes: number }> {
    if (meta.queue) throw new Error('the DynamoDB checkpoint store cannot carry queue work: send it to SQS');
    const { runId } = state;
    const head = encodeHead(state);
    const now = this.now;
    const headAttributes = await this.spill.keep('head', head);
    const records = await Promise.all(state.steps.map(async (record) => {
      const text = encodeStep(record);
      return { step: record.step, bytes: Buffer.byteLength(text), attributes: await this.spill.keep('record', text) };
    }));
    const bytes = Buffer.byteLength(head) + records.reduce((sum, r) => sum + r.bytes, 0);
    const headItem = {
      [PK]: runPk(runId), [SK]: HEAD_SK,
      ...this.headAttributes(state, 1, now, headAttributes, meta, bytes), [CREATED_AT_ATTRIBUTE]: now,
    };
    const recordItem = (r: (typeof records)[number]): Item => fits({ [PK]: runPk(runId), [SK]: stepSk(r.step), step: r.step, ...r.attributes });
    // A fork's first steps become this run's own records. Few enough, they commit with the head; more,
    // they are written first and the head, written last, makes them visible.
    const inline = records.length <= CREATE_INLINE_STEPS;
    if (!inline) {
      const existing = await this.headItem(runId);
      if (existing?.[DELETED_ATTRIBUTE] !== undefined) {
        await this.freeDeletedId(runId, existing[FREE_AT_ATTRIBUTE] === undefined ? undefined : Number(existing[FREE_AT_ATTRIBUTE]), reused);
        return this.create(state, meta, true);
      }
      if (existing) return { created: false, version: Number(existing.version), bytes: 0 };
      await this.putRecordsFirst(runId, records.map(recordItem));
    }
    try {
      await retryConflicts(() => this.transact([
        {
          Put: {
            TableName: this.table, Item: fits(headItem),
            // Version 1 is written once: a second start of the same run id must not reset a run in progress.
            ...ABSENT,
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          },
        },
        { Put: { TableName: this.table, Item: fits(this.historyRow(runId, 1, state, headAttributes, bytes, meta, undefined, now)) } },
        ...(inline ? records.map((r): TransactItem => ({
          Put: {
            TableName: this.table, Item: recordItem(r),
            ...ABSENT,
          },
        })) : []),
      ]));
      return { created: true, version: 1, bytes };
    } catch (error) {
      const reasons = cancellationReasons(error);
      const head = reasons?.[0];
      if (head?.Code !== 'ConditionalCheckFailed') {
        if (reasons?.some((r) => r.Code === 'ConditionalCheckFailed')) throw leftoverRecords(runId);
        throw error;
      }
      if (head.Item?.[DELETED_ATTRIBUTE] !== undefined) {
        await this.freeDeletedId(runId, rawNumber(head.Item, FREE_AT_ATTRIBUTE), reused);
        return this.create(state, meta, true);
      }
      const version = rawNumber(head.Item, 'version') ?? (await this.load(runId))?.version ?? 1;
      // Another create of this id won while this one wrote its records first: take back those past the
      // winner's steps, which its later commits would otherwise find already written.
      if (!inline) await this.deleteOwnRecordsAfter(rawNumber(head.Item, 'step') ?? 0, records.map(recordItem));
      return { created: false, version, bytes: 0 };
    }
  }

  /**
   * A create found the mark of a deleted run (DELETED_ATTRIBUTE) at its head: removed once the id is free
   * (FREE_AT_ATTRIBUTE), for the create to be tried again, once; refused while it is not, saying when it
   * will be, or while the delete is unfinished (no FREE_AT_ATTRIBUTE), saying to finish it.
   */
  private async freeDeletedId(runId: string, freeAt: number | undefined, reused: boolean): Promise<void> {
    if (freeAt === undefined || reused) throw beingDeleted(runId);
    if (this.now < freeAt) {
      throw new RunIdInUseError(runId, `run id ${runId} belongs to a run deleted less than ${ID_REUSE_AFTER_MS / 60_000} minutes after its last step: SQS would drop a new run's messages as that run's until ${new Date(freeAt).toISOString()} (its deduplication window); start it then, or under another id`);
    }
    try {
      await this.options.doc.send(new DeleteCommand({
        TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK },
        ConditionExpression: '#free = :free', ExpressionAttributeNames: { '#free': FREE_AT_ATTRIBUTE }, ExpressionAttributeValues: { ':free': freeAt },
      }));
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error; // another create removed it first: the retry meets its run
    }
  }

  /**
   * Writes step records ahead of their head, each only if absent or the same bytes: a repeated create of
   * the same fork passes, and records some other unfinished create left under this id are never replaced.
   */
  private async putRecordsFirst(runId: string, items: Item[]): Promise<void> {
    for (let i = 0; i < items.length; i += CREATE_PUT_CONCURRENCY) {
      await Promise.all(items.slice(i, i + CREATE_PUT_CONCURRENCY).map(async (item) => {
        const e = new Expression();
        const same = sameRecord(e, item);
        try {
          await this.options.doc.send(new PutCommand({
            TableName: this.table, Item: item, ConditionExpression: `attribute_not_exists(${e.name(PK)}) OR (${same})`, ...e.params(),
          }));
        } catch (error) {
          if (!isConditionalCheckFailed(error)) throw error;
          if (await this.headItem(runId)) return; // the run exists after all: the create reports that
          throw leftoverRecords(runId);
        }
      }));
    }
  }

  private async deleteOwnRecordsAfter(step: number, items: Item[]): Promise<void> {
    await Promise.all(items.filter((item) => Number(item.step) > step).map(async (item) => {
      const e = new Expression();
      try {
        await this.options.doc.send(new DeleteCommand({
          TableName: this.table, Key: { [PK]: item[PK], [SK]: item[SK] }, ConditionExpression: sameRecord(e, item), ...e.params(),
        }));
      } catch (error) {
        if (!isConditionalCheckFailed(error)) throw error; // the winner wrote its own record there: keep it
      }
    }));
  }

  private async headItem(runId: string): Promise<Item | undefined> {
    return (await this.options.doc.send(new GetCommand({
      TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK }, ConsistentRead: true,
    }))).Item;
  }

  /**
   * Cold, the head and every step record in one strongly consistent Query (one call per 1 MB page). Warm
   * (afterStep), the head, then, only if the run has steps the caller does not hold, a Query for exactly
   * those. Capacity is charged for every item a Query reads, filtered or not, so the held records must stay
   * outside the key range; the head and the newer steps are not adjacent in sort order (h < s#<held> <
   * s#<newer>), so this takes two calls when the caller is behind. The common warm case (the caller ran the
   * previous step) is one GetItem of the head. Bounded (recent), one Query for the head and the summaries
   * (adjacent: h < p#), then one for the records after the last block condensed at the head's step. Every read is strongly consistent;
   * the records Query ends at the head's step, so a commit landing between the two reads adds nothing the
   * head does not account for.
   */
  async load(runId: string, options: { afterStep?: number; recent?: boolean } = {}): Promise<StoredCheckpoint | undefined> {
    let after = options.afterStep ?? 0;
    let summaries: string[] | undefined;
    const items = options.recent ? await this.between(runId, HEAD_SK, SUMMARIES_END)
      : after ? [await this.headItem(runId)].filter((item) => item !== undefined)
      : await this.between(runId, HEAD_SK, STEPS_END);
    const head = items.find((item) => item[SK] === HEAD_SK);
    // A run being deleted (deleteRun) is no run to read.
    if (!head || head[DELETED_ATTRIBUTE] !== undefined) return undefined;
    const last = Number(head.step);
    if (options.recent) {
      // Only the blocks condensed at the head's step: a commit landing after this read saw the head may
      // have written the next block's summary, whose records the run at this step still lists.
      summaries = [];
      let through = 0;
      // Between the head and SUMMARIES_END there are only summaries.
      for (const item of items) {
        if (item === head || Number(item.last) > condensedBlocks(last) * CONDENSE_BLOCK) continue;
        summaries.push(String(item.summary));
        through = Number(item.last);
      }
      after = Math.max(after, through);
    }
    if ((options.recent || after) && last > after) items.push(...await this.between(runId, stepSk(after + 1), stepSk(last)));
    // A Query is not a snapshot: a commit landing while it pages may add a record after the head it
    // already read. The head is the truth; records past its step belong to a version this read did not see.
    const stepItems = items.filter((item) => isStepSk(String(item[SK])) && Number(item.step) <= last);
    const [headText, pending, ...steps] = await Promise.all([
      this.restore(head, 'head'),
      head.pending !== undefined || head.pendingRef !== undefined ? this.restore(head, 'pending') : Promise.resolve(undefined),
      ...stepItems.map((item) => this.restore(item, 'record')),
    ]);
    return {
      runId, version: Number(head.version), status: head.status as RunStatus, head: headText ?? '', steps: steps.map((s) => s ?? ''),
      ...(after ? { stepsAfter: after } : {}),
      ...(summaries ? { summaries } : {}),
      ...(pending !== undefined ? { pending } : {}),
      workerId: String(head.workerId), updatedAt: Number(head.updatedAt),
      ...(Number(head[RESTARTS_ATTRIBUTE] ?? 0) ? { restarts: Number(head[RESTARTS_ATTRIBUTE]) } : {}),
      ...(typeof head[CANCEL_ATTRIBUTE] === 'string' ? { cancelRequested: head[CANCEL_ATTRIBUTE] } : {}),
    };
  }

  async records(runId: string, range: StepRange): Promise<string[]> {
    if (range.through <= range.after) return [];
    // Step items are keyed by step: the range is one Query, charged for the records in it and no others.
    const items = await this.between(runId, stepSk(range.after + 1), stepSk(range.through));
    const records = await Promise.all(items.filter((item) => isStepSk(String(item[SK]))).map((item) => this.restore(item, 'record')));
    return records.map((r) => r ?? '');
  }

  /** The run's items with sort keys from `from` to `to`, in one strongly consistent Query (paged). */
  private between(runId: string, from: string, to: string): Promise<Item[]> {
    return this.queryAll({
      KeyConditionExpression: '#pk = :pk AND #sk BETWEEN :from AND :to',
      ExpressionAttributeNames: { '#pk': PK, '#sk': SK },
      ExpressionAttributeValues: { ':pk': runPk(runId), ':from': from, ':to': to },
    });
  }

  async addRestarts(runId: string, expectedVersion: number, delta: number): Promise<number> {
    const e = new Expression();
    // ADD on the head, fenced on the version, which it leaves as it is: no checkpoint, no history row.
    const result = await this.updateFenced(runId, expectedVersion, e, `ADD ${e.name(RESTARTS_ATTRIBUTE)} ${e.value(delta)}`, { ReturnValues: 'UPDATED_NEW' });
    return Number(result.Attributes?.[RESTARTS_ATTRIBUTE] ?? 0);
  }

  async requestCancel(runId: string, expectedVersion: number, request: string): Promise<number> {
    const e = new Expression();
    // On the head, fenced on the run still running at this version or a later one, which it leaves as it
    // is: no checkpoint, no history row, so a step running now still commits (and its commit, which sets
    // only what it names, keeps this).
    const update = e.update({ [CANCEL_ATTRIBUTE]: request });
    const condition = `${e.name('status')} = ${e.value('running')} AND ${e.name('version')} >= ${e.value(expectedVersion)}`;
    try {
      const written = await retryConflicts(() => this.options.doc.send(new UpdateCommand({
        TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK },
        UpdateExpression: update, ConditionExpression: condition, ...e.params(), ReturnValues: 'ALL_NEW',
      })));
      return Number(written.Attributes?.version);
    } catch (error) {
      if (isConditionalCheckFailed(error)) throw new StaleVersionError(runId, expectedVersion);
      throw error;
    }
  }

  /** An update of the head, only at `expectedVersion` (else StaleVersionError). */
  private async updateFenced(runId: string, expectedVersion: number, e: Expression, update: string, extra: { ReturnValues?: 'UPDATED_NEW' } = {}) {
    try {
      return await retryConflicts(() => this.options.doc.send(new UpdateCommand({
        TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK },
        UpdateExpression: update, ConditionExpression: `${e.name('version')} = ${e.value(expectedVersion)}`, ...e.params(), ...extra,
      })));
    } catch (error) {
      if (isConditionalCheckFailed(error)) throw new StaleVersionError(runId, expectedVersion);
      throw error;
    }
  }

  async recordDecision(runId: string, expectedVersion: number, decision: Decision): Promise<void> {
    const attributes = await this.spill.keep('pending', encodeDecision(decision));
    // Names this write, so a retry of it can recognise its own decision (two workers' decisions can be
    // byte for byte the same: the same answer in the same millisecond).
    const token = randomBytes(8).toString('hex');
    const e = new Expression();
    const update = e.update({ ...attributes, pendingStep: decision.step, pendingToken: token });
    // Fenced like a commit: the run must still be at the version the decision was made from. Write-once
    // per step: a second decision for the same step could run a different call under the same idempotency
    // key. A decision for another step can only be a leftover of an older step, so it may be replaced.
    const condition = `${e.name('version')} = ${e.value(expectedVersion)} AND (attribute_not_exists(${e.name('pendingStep')}) OR ${e.name('pendingStep')} <> ${e.value(decision.step)})`;
    try {
      await retryConflicts(() => this.options.doc.send(new UpdateCommand({
        TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK },
        UpdateExpression: update, ConditionExpression: condition, ...e.params(),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      })));
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const item = (error as { Item?: CancellationReason['Item'] }).Item;
      const latest = rawNumber(item, 'version');
      // The SDK retries a write whose answer was lost (a timeout, a 500) though DynamoDB applied it; the
      // retry then fails its condition against the decision the first attempt wrote: ours, so done.
      if (latest === expectedVersion && item?.pendingToken?.S === token) return;
      throw new StaleVersionError(runId, expectedVersion, latest === expectedVersion ? `step ${decision.step} already has a decision` : '');
    }
  }

  async commit(write: CheckpointWrite): Promise<CommitResult> {
    // SQS and S3 are beside this table, not in it: queue work or a blob given here would be lost, so refused.
    if (write.queue || write.blobs?.length) throw new Error('the DynamoDB checkpoint store cannot carry queue work or blobs: send them to SQS and S3');
    const { runId, expectedVersion, state, appended } = write;
    const head = encodeHead(state);
    const step = appended ? encodeStep(appended) : undefined;
    const summaries = (write.summaries ?? []).map((block) => ({ block, text: encodeSummary(block) }));
    const bytes = Buffer.byteLength(head) + (step ? Buffer.byteLength(step) : 0) + summaries.reduce((n, s) => n + Buffer.byteLength(s.text), 0);
    const version = expectedVersion + 1;
    const now = this.now;
    const headAttributes = await this.spill.keep('head', head);

    const e = new Expression();
    const update = e.update(
      this.headAttributes(state, version, now, headAttributes, write, bytes, appended),
      // The decision has become the step record: drop it with the same write. A new version starts
      // with no restarts. A cancel request stays until the run ends, however it ends.
      [
        ...(appended ? ['pending', 'pendingRef', 'pendingStep', 'pendingToken'] : []), RESTARTS_ATTRIBUTE,
        ...(isTerminal(state.status) ? [CANCEL_ATTRIBUTE] : []),
      ],
    );
    const items: TransactItem[] = [{
      Update: {
        TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK }, UpdateExpression: update,
        // The fence: only a writer holding the latest version may write the next one. A worker whose version
        // was overtaken fails here, and the transaction drops its step record and history row with it.
        ConditionExpression: `${e.name('version')} = ${e.value(expectedVersion)}`, ...e.params(),
      },
    }];
    if (appended && step) {
      const record = await this.spill.keep('record', step);
      items.push({
        Put: {
          TableName: this.table, Item: fits({ [PK]: runPk(runId), [SK]: stepSk(appended.step), step: appended.step, ...record }),
          // A step record is written once. It cannot exist while the fence holds; if it ever did, the commit
          // fails instead of rewriting a completed step.
          ...ABSENT,
        },
      });
    }
    if (state.status === 'waiting' && state.wait?.event) {
      // Found by the event in one strongly consistent Query; a GSI could miss a wait that just began.
      const { type, key } = state.wait.event;
      items.push({
        Put: {
          TableName: this.table,
          Item: {
            [PK]: waitEventPk(type, key), [SK]: runId, runId, agent: state.agent, waitId: state.wait.id, version, deadline: state.wait.deadline,
            [TTL_ATTRIBUTE]: Math.ceil(state.wait.deadline / 1000) + 24 * 3600,
          },
        },
      });
    }
    const left = state.status === 'waiting' && state.wait ? waitLeftovers(runId, state.wait) : undefined;
    if (left) {
      // In the same write as the wait: deleteRun finds by it what the wait leaves in other partitions,
      // which the table could otherwise find only by a scan.
      items.push({ Put: { TableName: this.table, Item: { [PK]: runPk(runId), [SK]: waitSk(state.wait!.id), ...left } } });
    }
    items.push({
      Put: {
        TableName: this.table, Item: fits(this.historyRow(runId, version, state, headAttributes, bytes, write, appended, now)),
        // Likewise: history rows are never rewritten.
        ...ABSENT,
      },
    });
    for (const { block, text } of summaries) {
      // Last, so the conditions keep their places in a cancellation's reasons. Unconditional: a summary is
      // the same whoever computes it from the block's records, and a condition failing on one written
      // already would cancel the whole checkpoint.
      items.push({
        Put: {
          TableName: this.table,
          Item: fits({ [PK]: runPk(runId), [SK]: summarySk(block.last), last: block.last, summary: text }),
        },
      });
    }
    try {
      await retryConflicts(() => this.transact(items));
    } catch (error) {
      throw staleOr(error, runId, expectedVersion, ['', `step ${appended?.step} is already recorded`, `checkpoint ${version} already exists`]);
    }
    return { version, bytes, head };
  }

  async markUnreadable(runId: string, expectedVersion: number, reason: string, meta: WriteMeta): Promise<CommitResult & { step: number }> {
    // The unreadable head is kept as it was (nothing is lost; an operator can inspect or repair it), and the
    // new history row points at the same bytes. Rare, so the extra read is fine.
    const current = await this.headItem(runId);
    if (!current || Number(current.version) !== expectedVersion) throw new StaleVersionError(runId, expectedVersion);
    const now = this.now;
    const version = expectedVersion + 1;
    const step = Number(current.step);
    const e = new Expression();
    const update = e.update({
      version, status: 'failed', reason: listedReason(reason), updatedAt: now,
      [STATUS_KEY]: statusKey('failed', runId), workerId: meta.workerId, codeVersion: meta.codeVersion, bytes: 0,
    }, ['tool', 'idempotencyKey', RESTARTS_ATTRIBUTE, CANCEL_ATTRIBUTE]);
    const row: Item = {
      [PK]: runPk(runId), [SK]: checkpointSk(version), version, step, status: 'failed',
      workerId: meta.workerId, codeVersion: meta.codeVersion, bytes: 0, at: now, reason: listedReason(reason),
      head: current.head, headRef: current.headRef, [TTL_ATTRIBUTE]: this.expiresAt(now),
    };
    try {
      await retryConflicts(() => this.transact([
        {
          Update: {
            TableName: this.table, Key: { [PK]: runPk(runId), [SK]: HEAD_SK }, UpdateExpression: update,
            // Fenced like any commit: a run that moved on is not failed by a worker that saw an older version.
            ConditionExpression: `${e.name('version')} = ${e.value(expectedVersion)}`, ...e.params(),
          },
        },
        { Put: { TableName: this.table, Item: fits(row), ...ABSENT } },
      ]));
    } catch (error) {
      throw staleOr(error, runId, expectedVersion, ['', `checkpoint ${version} already exists`]);
    }
    return { version, bytes: 0, step };
  }

  async history(runId: string, page: HistoryPage = {}): Promise<CheckpointInfo[]> {
    const [head] = await this.between(runId, HEAD_SK, HEAD_SK);
    if (!head || head[DELETED_ATTRIBUTE] !== undefined) return [];
    // The latest checkpoint comes from the head, which never expires; the rows below it newest first.
    const latest = Number(head.version);
    const before = Math.min(page.before ?? latest + 1, latest + 1);
    const limit = page.limit ?? Number.POSITIVE_INFINITY;
    const rows = before > latest && limit > 0 ? [checkpointInfo(runId, head, Number(head.updatedAt))] : [];
    const nowSeconds = this.now / 1000;
    let start: Record<string, unknown> | undefined;
    while (rows.length < limit && before > 1) {
      const result = await this.options.doc.send(new QueryCommand({
        TableName: this.table, ConsistentRead: true, ScanIndexForward: false,
        KeyConditionExpression: '#pk = :pk AND #sk BETWEEN :from AND :to',
        ExpressionAttributeNames: { '#pk': PK, '#sk': SK },
        ExpressionAttributeValues: { ':pk': runPk(runId), ':from': HISTORY_START, ':to': checkpointSk(before - 1) },
        // A few more than the page needs: TTL deletes expired rows within a day or two, and until then
        // they are read and skipped here, so the retention window is exact.
        ...(Number.isFinite(limit) ? { Limit: Math.min(limit - rows.length + 16, 1000) } : {}),
        ...(start ? { ExclusiveStartKey: start } : {}),
      }));
      for (const item of result.Items ?? []) {
        if (rows.length >= limit) break;
        if (isCheckpointSk(String(item[SK])) && Number(item.version) < latest && Number(item[TTL_ATTRIBUTE]) > nowSeconds) {
          rows.push(checkpointInfo(runId, item, Number(item.at)));
        }
      }
      start = result.LastEvaluatedKey;
      if (!start) break;
    }
    return rows.sort((a, b) => a.version - b.version);
  }

  async waitingFor(type: string, key: string): Promise<OpenWait[]> {
    const items = await this.queryAll({
      KeyConditionExpression: '#pk = :pk', ExpressionAttributeNames: { '#pk': PK }, ExpressionAttributeValues: { ':pk': waitEventPk(type, key) },
    });
    // Entries of waits that ended stay until TTL; an answer checks the head, so they only cost a read.
    return items.map((item) => ({
      runId: String(item.runId), agent: String(item.agent), waitId: String(item.waitId), version: Number(item.version), deadline: Number(item.deadline),
    }));
  }

  async dueWaits(before: number, limit = 100, agents?: readonly string[], after?: WaitPosition): Promise<OpenWait[]> {
    if (agents?.length === 0) return [];
    const pages = await Promise.all(waitShards().map((shard) => this.shardDueWaits(shard, before, limit, agents, after)));
    return pages.flat().sort(byDeadline).slice(0, limit);
  }

  /**
   * One shard's first `limit` due waits after `after`. The index sorts by deadline only, so waits due in
   * the same millisecond come in no set order: a full page also reads every other wait of its last
   * millisecond, or the merged page could keep one of them and leave out one that precedes it by run id,
   * which the next page (after the kept one) would then skip.
   */
  private async shardDueWaits(shard: string, before: number, limit: number, agents: readonly string[] | undefined, after: WaitPosition | undefined): Promise<OpenWait[]> {
    const keep = (wait: OpenWait) => !after || byDeadline(wait, after) > 0;
    const waits = await this.queryDueWaits(shard, after ? { from: after.deadline, to: before } : { to: before }, agents, keep, limit);
    const last = waits[waits.length - 1];
    if (waits.length < limit || !last) return waits;
    const seen = new Set(waits.map((wait) => wait.runId));
    const ties = await this.queryDueWaits(shard, { from: last.deadline, to: last.deadline }, agents, (wait) => keep(wait) && !seen.has(wait.runId), Infinity);
    return [...waits, ...ties];
  }

  private async queryDueWaits(
    shard: string, deadlines: { from?: number; to: number }, agents: readonly string[] | undefined, keep: (wait: OpenWait) => boolean, limit: number,
  ): Promise<OpenWait[]> {
    const e = new Expression();
    const range = deadlines.from === undefined
      ? `${e.name(WAIT_DEADLINE)} <= ${e.value(deadlines.to)}`
      : `${e.name(WAIT_DEADLINE)} BETWEEN ${e.value(deadlines.from)} AND ${e.value(deadlines.to)}`;
    const key = `${e.name(WAIT_SHARD)} = ${e.value(shard)} AND ${range}`;
    const filter = agents ? `${e.name('agent')} IN (${agents.map((agent) => e.value(agent)).join(', ')})` : undefined;
    const waits: OpenWait[] = [];
    let start: Record<string, unknown> | undefined;
    do {
      // A filter is applied after Limit: a page of other agents' waits is read past, not taken as the end;
      // so is a page of waits at or before `after`.
      const page = await this.options.doc.send(new QueryCommand({
        TableName: this.table, IndexName: WAIT_INDEX, KeyConditionExpression: key, ...(filter ? { FilterExpression: filter } : {}),
        ...e.params(), ...(Number.isFinite(limit) ? { Limit: limit } : {}), ...(start ? { ExclusiveStartKey: start } : {}),
      }));
      for (const item of page.Items ?? []) {
        const wait = { runId: String(item.runId), agent: String(item.agent), waitId: String(item.waitId), version: Number(item.version), deadline: Number(item[WAIT_DEADLINE]) };
        if (keep(wait) && waits.length < limit) waits.push(wait);
      }
      start = page.LastEvaluatedKey;
    } while (start && waits.length < limit);
    return waits;
  }

  async list(query: ListRunsQuery = {}): Promise<RunSummary[]> {
    const limit = query.limit ?? 100;
    const keys = (query.status ? [query.status] : [...RUN_STATUSES]).flatMap(statusKeys);
    const pages = await Promise.all(keys.map((key) => this.queryStatus(key, query, limit)));
    return pages.flat().sort(byListOrder).slice(0, limit);
  }

  /**
   * One shard's first `limit` runs in the list's order. The index sorts by update time only, so runs
   * updated in the same millisecond come in no set order: a full page also reads every other run of its
   * last millisecond, or the merged page could keep a run of that millisecond and leave out one that
   * precedes it by run id, which the next page (after the kept one) would then skip.
   */
  private async queryStatus(key: string, query: ListRunsQuery, limit: number): Promise<RunSummary[]> {
    const { updatedBefore, updatedAfter, after } = query;
    // The tighter bound on the sort key; runs of `after`'s millisecond are filtered by run id below. A
    // lower bound (updatedAfter: runs stamped by a clock ahead, rare and few) is the key's, the rest filters.
    const bound = updatedAfter !== undefined ? { op: '>', value: updatedAfter }
      : updatedBefore !== undefined && (after === undefined || updatedBefore <= after.updatedAt)
        ? { op: '<', value: updatedBefore } : after ? { op: '<=', value: after.updatedAt } : undefined;
    const keep = (run: RunSummary) => (!after || isAfter(run, after)) && (updatedAfter === undefined || updatedBefore === undefined || run.updatedAt < updatedBefore);
    const runs = await this.queryIndex(key, bound, keep, limit);
    const last = runs[runs.length - 1];
    if (runs.length < limit || !last) return runs;
    const seen = new Set(runs.map((run) => run.runId));
    const ties = await this.queryIndex(key, { op: '=', value: last.updatedAt }, (run) => keep(run) && !seen.has(run.runId), Infinity);
    return [...runs, ...ties];
  }

  private async queryIndex(key: string, bound: { op: string; value: number } | undefined, keep: (run: RunSummary) => boolean, limit: number): Promise<RunSummary[]> {
    const e = new Expression();
    let condition = `${e.name(STATUS_KEY)} = ${e.value(key)}`;
    if (bound) condition += ` AND ${e.name(STATUS_SORT)} ${bound.op} ${e.value(bound.value)}`;
    const runs: RunSummary[] = [];
    let start: Record<string, unknown> | undefined;
    do {
      const page = await this.options.doc.send(new QueryCommand({
        TableName: this.table, IndexName: STATUS_INDEX, KeyConditionExpression: condition, ...e.params(),
        ScanIndexForward: false, ...(Number.isFinite(limit) ? { Limit: limit - runs.length } : {}), ...(start ? { ExclusiveStartKey: start } : {}),
      }));
      for (const item of page.Items ?? []) {
        const run = runSummary(item);
        if (keep(run) && runs.length < limit) runs.push(run);
      }
      start = page.LastEvaluatedKey;
    } while (start && runs.length < limit);
    return runs;
  }

  /**
   * Three writes, so that a process killed between them leaves nothing a reader takes for a run, and
   * nothing a new run of the id would build on: the head is marked deleted first (DELETED_ATTRIBUTE),
   * fenced on the version and a terminal status, with the version moved past every writer's and the run
   * taken out of the status and wait indexes; load() and history() no longer see it, and a create of the
   * id is refused while the mark stands. Then every other item of the run's partition and its steps'
   * idempotency records go, in batches; the head last, for a bare mark. Refused, before the mark, while
   * an effect of the run still holds its key (refuseLiveClaims). Deleting the head first would have let a create of
   * the same id begin among the old run's step and history rows (its first commits then fail on rows
   * written already) and find its idempotency records. A delete interrupted after the mark is finished by
   * the next one, which finds the mark (expectedVersion undefined).
   *
   * Idempotency records: those of the run's steps, <runId>/step-1 to the step after its last (a decision
   * recorded and not completed), which a new run of the id would find, and its approval emails'
   * (approvalEmailKey); with the waitevt# items of its event waits. The last two the run's w# items name
   * (waitLeftovers): a table holds no other way to find them but a scan. A run whose waits were written
   * before w# items were leaves those to their TTL (a day after the wait's deadline; the ledger's 30 days).
   */
  async deleteRun(runId: string, expectedVersion?: number): Promise<boolean> {
    const key = { [PK]: runPk(runId), [SK]: HEAD_SK };
    let head: Item | undefined;
    if (expectedVersion === undefined) {
      head = await this.headItem(runId);
      // A head without the mark is a run (or a create writing its records first): not this call's to touch.
      if (head?.[DELETED_ATTRIBUTE] === undefined) return false;
      // A finished delete's mark, kept while SQS may still drop a new run's messages: nothing to finish.
      if (head[FREE_AT_ATTRIBUTE] !== undefined) return false;
    } else {
      await this.refuseLiveClaims(runId);
      const e = new Expression();
      const update = e.update({ [DELETED_ATTRIBUTE]: this.now, version: expectedVersion + 1 }, [STATUS_KEY, WAIT_SHARD, WAIT_DEADLINE]);
      const ended = TERMINAL_STATUSES.map((status) => e.value(status)).join(', ');
      const condition = `${e.name('version')} = ${e.value(expectedVersion)} AND ${e.name('status')} IN (${ended}) AND attribute_not_exists(${e.name(DELETED_ATTRIBUTE)})`;
      try {
        head = (await retryConflicts(() => this.options.doc.send(new UpdateCommand({
          TableName: this.table, Key: key, UpdateExpression: update, ConditionExpression: condition, ...e.params(), ReturnValues: 'ALL_NEW',
        })))).Attributes;
      } catch (error) {
        if (isConditionalCheckFailed(error)) throw new StaleVersionError(runId, expectedVersion, 'it is not at that version, or has not ended');
        throw error;
      }
    }
    const step = Number(head?.step ?? 0);
    const items = await this.queryAll({
      KeyConditionExpression: '#pk = :pk', ExpressionAttributeNames: { '#pk': PK, '#sk': SK, '#event': WAIT_EVENT, '#keys': WAIT_LEDGER_KEYS },
      ExpressionAttributeValues: { ':pk': runPk(runId) }, ProjectionExpression: '#pk, #sk, #event, #keys',
    });
    // What lies outside the partition first, its w# items with the rest of the partition after it: batches
    // go in order, each done before the next, so a delete interrupted midway has deleted no w# item whose
    // waitevt# item or email records are still there, and the next delete (expectedVersion undefined, the
    // head still marked) reads them from the partition again and finishes. A key met twice (a run that
    // waited twice for one event) is sent once: BatchWriteItem refuses a batch naming an item twice.
    const outside = new Map<string, Item>();
    const add = (pk: string, sk: string) => outside.set(`${pk}\n${sk}`, { [PK]: pk, [SK]: sk });
    for (let n = 1; n <= step + 1; n++) add(ledgerPk(idempotencyKey(runId, n)), LEDGER_SK);
    for (const item of items.filter((i) => isWaitSk(String(i[SK])))) {
      if (typeof item[WAIT_EVENT] === 'string') add(item[WAIT_EVENT], runId);
      for (const key of (item[WAIT_LEDGER_KEYS] as string[] | undefined) ?? []) add(ledgerPk(key), LEDGER_SK);
    }
    const keys = [
      ...outside.values(),
      ...items.filter((item) => item[SK] !== HEAD_SK).map((item) => ({ [PK]: item[PK], [SK]: item[SK] })),
    ];
    await this.deleteItems(keys);
    // Last, and only while it is still a delete's mark: a bare mark (no data of the run) stands in for the
    // head. Within SQS's deduplication window of the run's last write, it holds the id until it may be
    // given again (FREE_AT_ATTRIBUTE); the create that finds it then removes it, at once if the window has
    // passed. Until then, or until its TTL (DELETED_MARK_TTL_MS), it tells an effect of the run that
    // finishes late that its run is gone.
    const freeAt = Number(head?.updatedAt ?? 0) + ID_REUSE_AFTER_MS;
    const onlyMark = { ConditionExpression: 'attribute_exists(#deleted)', ExpressionAttributeNames: { '#deleted': DELETED_ATTRIBUTE } };
    try {
      const now = this.now;
      await this.options.doc.send(new PutCommand({
        TableName: this.table, ...onlyMark,
        Item: { ...key, [DELETED_ATTRIBUTE]: head?.[DELETED_ATTRIBUTE] ?? now, [FREE_AT_ATTRIBUTE]: freeAt, [TTL_ATTRIBUTE]: Math.ceil((now + DELETED_MARK_TTL_MS) / 1000) },
      }));
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error; // another delete finished it first
    }
    return true;
  }

  /**
   * An effect of the run still running (a tool's timeoutMs ended its try, or the run failed or was
   * cancelled, while the effect went on) holds its key's claim: deleted, the claim would let a new run of
   * the id apply the effect again beside it. Looked for before the head is marked, under the keys the
   * delete deletes: its steps' and its approval emails'. Live as the ledger's claim judges it: its lease
   * has not run out (dynamo-ledger.ts takes over a claim whose leaseUntil is past). A claim whose lease
   * ran out is a dead holder's, or a frozen one's, whose completion finds its run's mark and writes nothing.
   */
  private async refuseLiveClaims(runId: string): Promise<void> {
    const head = await this.headItem(runId);
    // No run, or not one that has ended: the mark's fence refuses it, saying so.
    if (!head || head[DELETED_ATTRIBUTE] !== undefined || !isTerminal(head.status as RunStatus)) return;
    const waits = await this.queryAll({
      KeyConditionExpression: '#pk = :pk AND begins_with(#sk, :wait)', ExpressionAttributeNames: { '#pk': PK, '#sk': SK, '#keys': WAIT_LEDGER_KEYS },
      ExpressionAttributeValues: { ':pk': runPk(runId), ':wait': waitSk('') }, ProjectionExpression: '#keys',
    });
    const keys: string[] = [];
    for (let n = 1; n <= Number(head.step ?? 0) + 1; n++) keys.push(idempotencyKey(runId, n));
    for (const wait of waits) keys.push(...((wait[WAIT_LEDGER_KEYS] as string[] | undefined) ?? []));
    const now = this.now;
    const projection = { ProjectionExpression: '#pk, #status, #lease', ExpressionAttributeNames: { '#pk': PK, '#status': 'status', '#lease': 'leaseUntil' }, ConsistentRead: true };
    for (let i = 0; i < keys.length; i += BATCH_GET_ITEMS) {
      let wanted: Item[] = keys.slice(i, i + BATCH_GET_ITEMS).map((k) => ({ [PK]: ledgerPk(k), [SK]: LEDGER_SK }));
      for (let tries = 0; wanted.length; tries++) {
        if (tries >= BATCH_WRITE_TRIES) throw new Error(`DynamoDB left ${wanted.length} reads unprocessed after ${tries} tries (throttled): nothing was deleted; run the delete again`);
        if (tries) await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** tries, 2_000)));
        const page = await this.options.doc.send(new BatchGetCommand({ RequestItems: { [this.table]: { Keys: wanted, ...projection } } }));
        for (const item of page.Responses?.[this.table] ?? []) {
          const leaseUntil = Number(item.leaseUntil);
          if (item.status === 'in_progress' && leaseUntil >= now) {
            throw new EffectStillRunningError(runId, String(head.status), String(item[PK]).slice(ledgerPk('').length), leaseUntil, retryAfterMs(leaseUntil, now));
          }
        }
        wanted = (page.UnprocessedKeys?.[this.table]?.Keys ?? []) as Item[];
      }
    }
  }

  /** BatchWriteItem deletes, 25 a call; what DynamoDB leaves unprocessed (throttling) is sent again after a pause. */
  private async deleteItems(keys: Item[]): Promise<void> {
    for (let i = 0; i < keys.length; i += BATCH_WRITE_ITEMS) {
      let requests = keys.slice(i, i + BATCH_WRITE_ITEMS).map((Key) => ({ DeleteRequest: { Key } }));
      for (let tries = 0; requests.length; tries++) {
        if (tries >= BATCH_WRITE_TRIES) throw new Error(`DynamoDB left ${requests.length} deletes unprocessed after ${tries} tries (throttled): run the delete again to finish it`);
        if (tries) await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** tries, 2_000)));
        const result = await this.options.doc.send(new BatchWriteCommand({ RequestItems: { [this.table]: requests } }));
        requests = (result.UnprocessedItems?.[this.table] ?? []) as typeof requests;
      }
    }
  }

  /** The head's attributes after a write: everything but the keys and the recorded decision. */
  private headAttributes(
    state: RunState, version: number, now: number, headAttributes: Record<string, string | undefined>,
    meta: WriteMeta, bytes: number, appended?: StepRecord,
  ): Item {
    const wait = state.status === 'waiting' ? state.wait : undefined;
    return {
      runId: state.runId, version, status: state.status, step: state.step, agent: state.agent,
      reason: state.reason === undefined ? undefined : listedReason(state.reason), updatedAt: now, [STATUS_KEY]: statusKey(state.status, state.runId),
      ...headAttributes,
      // The open wait, in the sparse deadline index while the run waits (removed by the write that ends it).
      waitId: wait?.id, [WAIT_SHARD]: wait ? waitShard(state.runId) : undefined, [WAIT_DEADLINE]: wait?.deadline,
      // The latest checkpoint's metadata lives here too, so history() can show it after its row expired.
      workerId: meta.workerId, codeVersion: meta.codeVersion, bytes, tool: appended?.tool, idempotencyKey: appended?.idempotencyKey,
    };
  }

  private historyRow(
    runId: string, version: number, state: RunState, headAttributes: Record<string, string | undefined>,
    bytes: number, meta: WriteMeta, appended: StepRecord | undefined, now: number,
  ): Item {
    return {
      [PK]: runPk(runId), [SK]: checkpointSk(version), version, step: state.step, status: state.status,
      tool: appended?.tool, idempotencyKey: appended?.idempotencyKey, workerId: meta.workerId, codeVersion: meta.codeVersion,
      bytes, at: now, reason: state.reason === undefined ? undefined : listedReason(state.reason), ...headAttributes, [TTL_ATTRIBUTE]: this.expiresAt(now),
    };
  }

  /** DynamoDB TTL wants epoch seconds. */
  private expiresAt(now: number): number {
    return Math.ceil((now + this.retentionMs) / 1000);
  }

  private async restore(item: Item, name: string): Promise<string | undefined> {
    try {
      return await this.spill.restore(item, name);
    } catch (error) {
      // Decoding reports the checkpoint unreadable with this reason, and the run fails with it.
      if (error instanceof MissingSpilledValueError) return unreadableText(error.message);
      throw error;
    }
  }

  private async transact(items: TransactItem[]): Promise<void> {
    await this.options.doc.send(new TransactWriteCommand({ TransactItems: items }));
  }

  private async queryAll(input: Omit<QueryCommandInput, 'TableName' | 'ExclusiveStartKey' | 'ConsistentRead'>): Promise<Item[]> {
    const items: Item[] = [];
    let start: Record<string, unknown> | undefined;
    do {
      const page = await this.options.doc.send(new QueryCommand({
        TableName: this.table, ConsistentRead: true, ...input, ...(start ? { ExclusiveStartKey: start } : {}),
      }));
      items.push(...(page.Items ?? []));
      start = page.LastEvaluatedKey;
    } while (start);
    return items;
  }
}

/** Maps a cancelled transaction to StaleVersionError when one of its conditions failed. */
function staleOr(error: unknown, runId: string, expectedVersion: number, details: string[]): unknown {
  const reasons = cancellationReasons(error);
  const failed = reasons?.findIndex((r) => r.Code === 'ConditionalCheckFailed') ?? -1;
  if (failed < 0) return error;
  return new StaleVersionError(runId, expectedVersion, details[failed] ?? '');
}

/** A condition that the stored step record holds exactly this item's bytes (inline or by ref). */
function sameRecord(e: Expression, item: Item): string {
  return typeof item.record === 'string'
    ? `${e.name('record')} = ${e.value(item.record)}`
    : `${e.name('recordRef')} = ${e.value(item.recordRef)}`;
}

/**
 * What a wait leaves outside its run's partition, as its w# item holds it: the waitevt# item of an event
 * wait, the idempotency keys of an approval wait's emails (lib/waits/drive.ts sends each under its key).
 * Undefined for a wait that leaves nothing (a sleep).
 */
function waitLeftovers(runId: string, wait: WaitRecord): Item | undefined {
  const left: Item = {};
  if (wait.event) left[WAIT_EVENT] = waitEventPk(wait.event.type, wait.event.key);
  if (wait.approvers?.length) left[WAIT_LEDGER_KEYS] = wait.approvers.map((approver) => approvalEmailKey(runId, wait.id, approver));
  return Object.keys(left).length ? left : undefined;
}

/** A create of an id whose earlier run's delete began and did not finish (DELETED_ATTRIBUTE). */
function beingDeleted(runId: string): RunIdInUseError {
  return new RunIdInUseError(runId, `run id ${runId} belongs to a run being deleted (a delete interrupted midway?): finish it with stepwise delete ${runId}, then start the run again`);
}

function leftoverRecords(runId: string): PermanentError {
  return new PermanentError(`run id ${runId} holds step records of another create that never finished (a fork that died midway?): create it again exactly as before, or use another run id`);
}

/** Refuses, before sending, an item DynamoDB would reject: spilling keeps this unreachable. */
function fits(item: Item): Item {
  const size = itemSize(item);
  if (size > DYNAMODB_ITEM_LIMIT) {
    throw new PermanentError(`a ${String(item[SK])} item of ${size} bytes would exceed DynamoDB's 400 KB item limit`);
  }
  return item;
}

function checkpointInfo(runId: string, item: Item, at: number): CheckpointInfo {
  return {
    runId, version: Number(item.version), step: Number(item.step), status: item.status as RunStatus,
    ...(typeof item.tool === 'string' ? { tool: item.tool } : {}),
    ...(typeof item.idempotencyKey === 'string' ? { idempotencyKey: item.idempotencyKey } : {}),
    workerId: String(item.workerId), codeVersion: String(item.codeVersion), bytes: Number(item.bytes), at,
  };
}

function runSummary(item: Item): RunSummary {
  return {
    runId: String(item.runId), version: Number(item.version), status: item.status as RunStatus, step: Number(item.step),
    agent: String(item.agent), updatedAt: Number(item[STATUS_SORT]),
    ...(typeof item.reason === 'string' ? { reason: item.reason } : {}),
  };
}
