import type * as Codec from '../core/codec.ts';
import type { StoredCheckpoint } from '../core/codec.ts';
import { CONDENSE_BLOCK, condensedBlocks } from '../core/condense.ts';
import { EffectStillRunningError, StaleVersionError } from '../core/errors.ts';
import { retryAfterMs } from '../core/lease.ts';
import { DEFAULT_RETENTION_MS } from '../core/retention.ts';
import type { Decision, RunState } from '../core/state.ts';
import { idempotencyKeyPrefix } from '../core/keys.ts';
import { isTerminal, type RunStatus } from '../core/statuses.ts';
import type {
  CheckpointInfo, CheckpointStore, CheckpointWrite, Clock, CommitResult, Delivery, HistoryPage, ListRunsQuery, OpenWait, RunSummary, StepRange, WaitPosition, WriteMeta,
} from '../ports.ts';
import { systemClock } from '../ports.ts';
import type Database from 'better-sqlite3';
import { MAX_VERSIONS, checkpointKey, checkpointsOfRun, immediate, latestVersionOf, newestCheckpointOf, preparedOnce, reading, stepKey, stepsOfRun, type Db } from './database.ts';
import { claimLeftMs, type ClaimLease } from './ledger-claims.ts';
import { refuseMovedFile } from './moved-file.ts';
import { encodeBlob, writeBlob } from './sqlite-blob-store.ts';
import { ackReceipt, enqueue, enqueueReceived, handOver, takeVisible, type HeldRow } from './sqlite-queue.ts';

export { DEFAULT_RETENTION_MS } from '../core/retention.ts';

/** Checkpoint versions one transaction of prune deletes at most: about 20-40 ms of the write lock each. */
export const PRUNE_BATCH = 500;

/**
 * The encoders, imported at the first write: a process that only reads, like `stepwise status`, then never
 * loads the state schemas and zod, most of its start time. Once loaded they are taken without an await
 * (`loaded ?? await encoders()`), which cost a write about a microsecond.
 */
let codec: Promise<typeof Codec> | undefined;
let loaded: typeof Codec | undefined;
const encoders = (): Promise<typeof Codec> => (codec ??= import('../core/codec.ts').then((module) => (loaded = module)));

interface RunRow { run_id: string; version: number; status: RunStatus; step: number; agent: string; reason: string | null; updated_at: number }

const LATEST_VERSION = `SELECT ${latestVersionOf('r.run_no')} AS version FROM runs r WHERE r.run_id = ?`;
/**
 * What a commit is fenced on: the run's status and reason, and its latest version; its number keys the row
 * it inserts. The cancel request comes with it: a step written under one is not remembered (lastStep).
 */
const FENCE = `SELECT r.status, r.reason, r.run_no, r.cancel_requested, ${latestVersionOf('r.run_no')} AS version FROM runs r WHERE r.run_id = ?`;
/**
 * Whether anything was written to the file since: rows this connection changed (any table), and
 * data_version, which moves when another connection commits. No table is read. Two statements, not one
 * SELECT of both: the table-valued pragma_data_version took 3.8 us outside a transaction and 1.5 us in
 * one, the two statements 2.8 us and 0.5 us (this machine, a loop of 200,000).
 */
const TOTAL_CHANGES = 'SELECT total_changes() AS changes';
const DATA_VERSION = 'PRAGMA data_version';
interface WriteMarks { changes: number; version: number }
/** A checkpoint row; one string, so the statement cache finds it at every step without building and hashing it anew. */
const INSERT_CHECKPOINT = `INSERT INTO checkpoints (id, run_no, run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, record, head, reason, created_at, expires_at) VALUES (${checkpointKey('?', '?')}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;
/** The run's checkpoint rows, `c`, joined to its runs row, `r`, found by its id: a range of the checkpoints' keys. */
const ROWS_OF_RUN = `runs r JOIN checkpoints c ON ${checkpointsOfRun('c', 'r.run_no')} WHERE r.run_id = ?`;

/**
 * Checkpoints in SQLite. A write is one transaction: check that the run's newest checkpoint is the version
 * the writer read (the fence), and insert the next version's row, which carries the step's record. A
 * running run's next step writes that row alone (one b-tree page, the physical floor of a durable step);
 * the runs row is written only when the status, the reason or the wait changes.
 */
export class SqliteCheckpointStore implements CheckpointStore {
  constructor(
    private readonly db: Db,
    /**
     * `carriesQueueWork`: the runtime's queue consumers read this file's queue table, so a commit may do
     * the step's send and ack in its own transaction (the local runtime sets it).
     */
    private readonly options: { retentionMs?: number; clock?: Clock; carriesQueueWork?: boolean; carriesBlobs?: boolean } = {},
  ) {
    this.carriesQueueWork = options.carriesQueueWork ?? false;
    this.carriesBlobs = options.carriesBlobs ?? false;
  }

  readonly carriesQueueWork: boolean;
  /**
   * The head row as this connection's last commit of a step left it, with the file's write marks taken
   * inside that transaction. While the marks have not moved, nothing was written since, by this
   * connection or another: a worker's next load of that run is this row, without reading it (the load's
   * join of the head row and the pending decision: the load phase went from 24-25 us to 17 with the fsync
   * off, bench/step-overhead.ts; most of what is left is the read transaction data_version needs). Its
   * next commit of the run, finding the marks unmoved under the write lock, takes its fence and its
   * queue hand-over from here too (10-12 us a worker-path step, bench/HISTORY.md).
   */
  private lastStep: LastStep | undefined;
  /** `carriesBlobs`: the runtime's blob store reads this file's blobs table, so a commit may write the step's blob. */
  readonly carriesBlobs: boolean;

  private sql(text: string): Database.Statement {
    return preparedOnce(this.db)(text);
  }

  /** The file's write marks now (WriteMarks). */
  private marks(): WriteMarks {
    const { data_version: version } = this.sql(DATA_VERSION).get() as { data_version: number };
    return { changes: this.totalChanges(), version };
  }

  private totalChanges(): number {
    return (this.sql(TOTAL_CHANGES).get() as { changes: number }).changes;
  }

  private get now(): number {
    return (this.options.clock ?? systemClock).now();
  }

  private get retentionMs(): number {
    return this.options.retentionMs ?? DEFAULT_RETENTION_MS;
  }

  async create(state: RunState, meta: WriteMeta & Pick<CheckpointWrite, 'queue'>): Promise<{ created: boolean; version: number; bytes: number }> {
    const { encodeHead, encodeStep } = loaded ?? await encoders();
    const head = encodeHead(state);
    if (meta.queue && !this.carriesQueueWork) throw new Error('this checkpoint store was not opened with the queue: it cannot carry queue work');
    return immediate(this.db, () => {
      const existing = this.latestVersion(state.runId);
      if (existing !== undefined) return { created: false, version: existing, bytes: 0 };
      const now = this.now;
      // The next number: the largest given so far, from its index. A deleted run's number may be given again
      // (it was the largest): its rows went with it (deleteRun), so the number's key ranges are empty.
      const { run_no: runNo } = this.sql('INSERT INTO runs (run_id, run_no, version, status, step, agent, reason, created_at, updated_at) VALUES (?, (SELECT coalesce(max(run_no), 0) + 1 FROM runs), 1, ?, ?, ?, NULL, ?, ?) RETURNING run_no')
        .get(state.runId, state.status, state.step, state.agent, now, now) as { run_no: number };
      // A fork's first steps become this run's own rows, in the same transaction as its head.
      let bytes = Buffer.byteLength(head);
      for (const record of state.steps) {
        const text = encodeStep(record);
        this.sql(`INSERT INTO steps (id, run_no, run_id, step, record) VALUES (${stepKey('?', '?')}, ?, ?, ?, ?)`).run(runNo, record.step, runNo, state.runId, record.step, text);
        bytes += Buffer.byteLength(text);
      }
      this.insertCheckpoint(runNo, state.runId, 1, state, head, bytes, meta, undefined, undefined, now);
      // Its first message with it: a process killed after the create leaves no running run without one.
      const send = meta.queue?.send;
      if (send) enqueue((text) => this.sql(text), send.message, send.delayMs ?? 0, now);
      return { created: true, version: 1, bytes };
    });
  }

  async load(runId: string, options: { afterStep?: number; recent?: boolean } = {}): Promise<StoredCheckpoint | undefined> {
    // A load that needs the head row alone (a worker's next step, holding the records) is that one
    // statement, a moment of the file by itself: no read transaction to open and close.
    if (!options.recent) {
      const written = this.lastStep?.runId === runId ? this.lastStep : undefined;
      const row = written && sameMarks(written.marks, this.marks()) ? written.row : this.headRow(runId);
      if (!row) return undefined;
      if (row.step <= (options.afterStep ?? 0)) return stored(runId, row, [], options.afterStep ?? 0);
    }
    // One read transaction, so the head, the summaries and the step rows come from the same moment.
    return reading(this.db, () => {
      const row = this.headRow(runId);
      if (!row) return undefined;
      const summaries = options.recent ? this.summariesOf(runId, row.step) : undefined;
      const after = Math.max(options.afterStep ?? 0, summaries?.through ?? 0);
      // The records are written with the heads, so none lies past the run's step: a caller that holds them
      // all (a worker's next step) has nothing to read. Past it, any record there is read, for decoding to refuse.
      const steps = row.step <= after ? [] : this.recordsAfter(runId, after);
      return stored(runId, row, steps, after, summaries?.texts);
    });
  }

  /** The run's newest checkpoint row with its runs row; the decision recorded for the next step comes with it (a step row with no record). */
  private headRow(runId: string): HeadRow | undefined {
    return this.sql(
      'SELECT c.version, r.status, c.step, r.reason, c.created_at AS updated_at, r.restarts, r.restarts_at, r.cancel_requested, c.head, c.worker_id, '
      + `(SELECT s.decision FROM steps s WHERE s.id = ${stepKey('r.run_no', 'c.step + 1')} AND s.record IS NULL) AS pending `
      + `FROM ${ROWS_OF_RUN} ORDER BY c.id DESC LIMIT 1`,
    ).get(runId) as HeadRow | undefined;
  }

  /**
   * The summaries of the blocks condensed at `step` (lib/core/condense.ts), and the last step they cover.
   * A gap (which no checkpoint leaves) is the decoder's to refuse.
   */
  private summariesOf(runId: string, step: number): { texts: string[]; through: number } {
    const rows = this.sql('SELECT last_step, summary FROM summaries WHERE run_id = ? AND last_step <= ? ORDER BY last_step')
      .all(runId, condensedBlocks(step) * CONDENSE_BLOCK) as { last_step: number; summary: string }[];
    return { texts: rows.map((r) => r.summary), through: rows.at(-1)?.last_step ?? 0 };
  }

  /**
   * The records after step `after`, in step order: those in checkpoint rows, newest first until one at or
   * before `after` (a run's step never goes down from one version to the next, so a cold resume reads only
   * the versions since its summaries), then those in the steps table (a fork's, pruned rows', older code's).
   */
  private recordsAfter(runId: string, after: number): string[] {
    const found: { step: number; record: string }[] = [];
    for (const row of this.sql(`SELECT c.step, c.record FROM ${ROWS_OF_RUN} ORDER BY c.id DESC`).iterate(runId) as IterableIterator<{ step: number; record: string | null }>) {
      if (row.step <= after) break;
      if (row.record !== null) found.push({ step: row.step, record: row.record });
    }
    found.push(...this.sql(`SELECT s.step, s.record FROM runs r JOIN steps s ON ${stepsOfRun('s', 'r.run_no')} AND s.step > ? WHERE r.run_id = ? AND s.record IS NOT NULL`).all(after, runId) as { step: number; record: string }[]);
    return found.sort((a, b) => a.step - b.step).map((r) => r.record);
  }

  /** The run's latest version, its newest checkpoint row (undefined: no such run). */
  private latestVersion(runId: string): number | undefined {
    return (this.sql(LATEST_VERSION).get(runId) as { version: number | null } | undefined)?.version ?? undefined;
  }

  async addRestarts(runId: string, expectedVersion: number, delta: number): Promise<number> {
    return immediate(this.db, () => {
      // Fenced like every write, but the version stays: this is not a checkpoint. Counted at this version
      // only (restarts_at), so the next commit resets them without writing the runs row; a count back at
      // 0 (a restart taken back) leaves no version behind.
      this.assertVersion(runId, expectedVersion);
      const count = 'CASE WHEN restarts_at = :version THEN restarts + :delta ELSE :delta END';
      const row = this.sql(`UPDATE runs SET restarts = ${count}, restarts_at = CASE WHEN ${count} = 0 THEN NULL ELSE :version END WHERE run_id = :runId RETURNING restarts`)
        .get({ version: expectedVersion, delta, runId }) as { restarts: number };
      return row.restarts;
    });
  }

  async requestCancel(runId: string, expectedVersion: number, request: string): Promise<number> {
    return immediate(this.db, () => {
      // Fenced on the run still running, at this version or a later one, but not a checkpoint: the version
      // stays, so a step running now still commits.
      const current = this.sql(FENCE).get(runId) as Fence | undefined;
      if (!current || current.status !== 'running' || current.version < expectedVersion) throw new StaleVersionError(runId, expectedVersion);
      this.sql('UPDATE runs SET cancel_requested = ? WHERE run_id = ?').run(request, runId);
      return current.version;
    });
  }

  async recordDecision(runId: string, expectedVersion: number, decision: Decision): Promise<void> {
    const { encodeDecision } = loaded ?? await encoders();
    immediate(this.db, () => {
      // Its side-effecting tool runs once this is written: never on a file no longer at its path (moved-file.ts).
      refuseMovedFile(this.db, true);
      this.assertVersion(runId, expectedVersion);
      const inserted = this.sql(`INSERT INTO steps (id, run_no, run_id, step, decision) SELECT ${stepKey('run_no', ':step')}, run_no, run_id, :step, :decision FROM runs WHERE run_id = :runId ON CONFLICT DO NOTHING`)
        .run({ step: decision.step, decision: encodeDecision(decision), runId });
      if (inserted.changes === 0) throw new StaleVersionError(runId, expectedVersion, `step ${decision.step} already has a decision`);
    });
  }

  async commit(write: CheckpointWrite): Promise<CommitResult> {
    const { encodeHead, encodeStep, encodeSummary } = loaded ?? await encoders();
    const head = encodeHead(write.state);
    const step = write.appended ? encodeStep(write.appended) : undefined;
    const summaries = (write.summaries ?? []).map((block) => ({ block, text: encodeSummary(block) }));
    const bytes = Buffer.byteLength(head) + (step ? Buffer.byteLength(step) : 0) + summaries.reduce((n, s) => n + Buffer.byteLength(s.text), 0);
    if (write.blobs?.length && !this.carriesBlobs) throw new Error('this checkpoint store was not opened with the blobs: it cannot carry them');
    const blobs = write.blobs?.map((b) => encodeBlob(b.ref, b.data));
    // A commit that fails keeps what was remembered: its own rolled-back writes moved total_changes, and
    // a winner's commit moved data_version, so the marks refuse it where it no longer holds.
    let remembered: LastStep | undefined;
    const result = immediate(this.db, () => {
      const now = this.now;
      // This connection's last step of the run, with the marks read under the write lock: unmoved, nothing
      // was written since, so the run is as that commit left it, and the fence needs no read. Inside the
      // transaction, reading the marks costs less than the fence's join (one statement, no table).
      const last = this.lastStep?.runId === write.runId ? this.lastStep : undefined;
      const startMarks = last ? this.marks() : undefined;
      const unchanged = last && sameMarks(last.marks, startMarks!) ? last : undefined;
      // The fence: the newest version is the one this writer read. Reads only; the insert below writes.
      const current: Fence | undefined = unchanged
        ? { status: 'running', reason: null, run_no: unchanged.runNo, cancel_requested: null, version: unchanged.row.version }
        : this.sql(FENCE).get(write.runId) as Fence | undefined;
      if (current?.version !== write.expectedVersion) throw new StaleVersionError(write.runId, write.expectedVersion);
      // Most commits are a running run's next step: the runs row, which holds what changes with the
      // status, stays as it is, so the step writes one row of one table. Any other commit writes it too.
      const stillRunning = write.state.status === 'running' && !write.state.reason && current.status === 'running' && current.reason === null;
      if (!stillRunning) {
        const wait = write.state.status === 'waiting' ? write.state.wait : undefined;
        this.sql(
          // A cancel request stays until the run ends, however it ends.
          'UPDATE runs SET version = ?, status = ?, step = ?, reason = ?, updated_at = ?, wait_id = ?, wait_event = ?, wait_deadline = ?, restarts = 0, cancel_requested = CASE WHEN ? THEN NULL ELSE cancel_requested END WHERE run_id = ?',
        ).run(
          write.expectedVersion + 1, write.state.status, write.state.step, write.state.reason ?? null, now,
          wait?.id ?? null, wait?.event ? waitEventKey(wait.event.type, wait.event.key) : null, wait?.deadline ?? null,
          isTerminal(write.state.status) ? 1 : 0, write.runId,
        );
      }
      const version = write.expectedVersion + 1;
      // Written once: a summary stored already (the same block's) stays as it is.
      for (const { block, text } of summaries) {
        this.sql('INSERT INTO summaries (run_id, last_step, summary) VALUES (?, ?, ?) ON CONFLICT DO NOTHING').run(write.runId, block.last, text);
      }
      // Before the record that refers to it is visible, in the same transaction: no record without its blob.
      for (const blob of blobs ?? []) writeBlob((text) => this.sql(text), blob, now);
      this.insertCheckpoint(current.run_no, write.runId, version, write.state, head, bytes, write, write.appended, step, now);
      // The step's queue work, in the same transaction: a crash leaves all of it or none of it.
      let received: Delivery[] | undefined;
      let held: HeldRow | undefined;
      if (write.queue) {
        if (!this.carriesQueueWork) throw new Error('this checkpoint store was not opened with the queue: it cannot carry queue work');
        const prepare = (text: string) => this.sql(text);
        const { send, ack, receive } = write.queue;
        // A busy worker's step: its delivery's row handed to the next version, still held, no page written.
        // With nothing written since this connection's last hand-over of it, what that one read still holds.
        const handed = send && receive && ack ? handOver(prepare, ack, send, receive, now, unchanged?.held) : undefined;
        held = handed?.held;
        received = handed?.received;
        if (!received) {
          // The next step's message, received already when it is what the receive would take. It rewrites
          // the run's queue row, the delivery's, so the ack after it finds that receipt gone and writes
          // nothing; it acks the delivery when the send was a duplicate, or there was none.
          if (send && receive) received = enqueueReceived(prepare, send, receive, now);
          if (send && !received) enqueue(prepare, send.message, send.delayMs ?? 0, now);
          if (ack) ackReceipt(prepare, ack, now);
          // After the send, so the message just sent is taken only if nothing older is visible.
          if (receive && !received) received = takeVisible(prepare, receive, now);
        }
      }
      // A running run's next step, written by this commit with nothing pending: its head row is known
      // (no decision for the step after a completed one can exist before this version does). The marks
      // are taken last, inside the transaction, so any later write moves them. data_version cannot have
      // moved since the start: no other connection commits while this one holds the write lock.
      if (stillRunning && write.appended && current.cancel_requested === null) {
        const row: HeadRow = {
          version, status: 'running', step: write.state.step, reason: null, updated_at: now, restarts: 0, restarts_at: null,
          cancel_requested: null, head, worker_id: write.workerId, pending: null,
        };
        const marks = startMarks ? { changes: this.totalChanges(), version: startMarks.version } : this.marks();
        remembered = { runId: write.runId, row, runNo: current.run_no, marks, ...(held ? { held } : {}) };
      }
      return { version, bytes, head, ...(received ? { received } : {}) };
    });
    // Only a transaction that committed is remembered.
    this.lastStep = remembered;
    return result;
  }

  async markUnreadable(runId: string, expectedVersion: number, reason: string, meta: WriteMeta): Promise<CommitResult & { step: number }> {
    return immediate(this.db, () => {
      const now = this.now;
      this.assertVersion(runId, expectedVersion);
      // The unreadable head is kept as it was: nothing is lost, an operator can inspect or repair it.
      const previous = this.sql(`SELECT r.run_no, c.step, c.head FROM runs r JOIN checkpoints c ON c.id = ${checkpointKey('r.run_no', '?')} WHERE r.run_id = ?`)
        .get(expectedVersion, runId) as { run_no: number; step: number; head: string };
      const version = expectedVersion + 1;
      this.sql("UPDATE runs SET version = ?, status = 'failed', step = ?, reason = ?, updated_at = ?, restarts = 0, cancel_requested = NULL WHERE run_id = ?")
        .run(version, previous.step, reason, now, runId);
      this.sql(
        `INSERT INTO checkpoints (id, run_no, run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, head, reason, created_at, expires_at) VALUES (${checkpointKey('?', '?')}, ?, ?, ?, ?, 'failed', NULL, NULL, ?, ?, 0, ?, ?, ?, ?)`,
      ).run(previous.run_no, version, previous.run_no, runId, version, previous.step, meta.workerId, meta.codeVersion, previous.head, reason, now, now + this.retentionMs);
      return { version, bytes: 0, step: previous.step };
    });
  }

  async history(runId: string, page: HistoryPage = {}): Promise<CheckpointInfo[]> {
    // Newest first down the run's key range from `before`, so a page reads its rows and no more; LIMIT -1 is all.
    const rows = this.sql(
      `SELECT c.run_id, c.version, c.step, c.status, c.tool, c.idempotency_key, c.worker_id, c.code_version, c.bytes, c.created_at FROM ${ROWS_OF_RUN} AND c.id < ${checkpointKey('r.run_no', '?')} ORDER BY c.id DESC LIMIT ?`,
    ).all(runId, Math.min(page.before ?? MAX_VERSIONS, MAX_VERSIONS), page.limit ?? -1) as { run_id: string; version: number; step: number; status: RunStatus; tool: string | null; idempotency_key: string | null; worker_id: string; code_version: string; bytes: number; created_at: number }[];
    return rows.reverse().map((r) => ({
      runId: r.run_id, version: r.version, step: r.step, status: r.status,
      ...(r.tool ? { tool: r.tool } : {}), ...(r.idempotency_key ? { idempotencyKey: r.idempotency_key } : {}),
      workerId: r.worker_id, codeVersion: r.code_version, bytes: r.bytes, at: r.created_at,
    }));
  }

  async records(runId: string, range: StepRange): Promise<string[]> {
    if (range.through <= range.after) return [];
    return reading(this.db, () => {
      const run = this.sql('SELECT run_no FROM runs WHERE run_id = ?').get(runId) as { run_no: number } | undefined;
      if (!run) return [];
      const found: { step: number; record: string }[] = [];
      const first = this.firstVersionPast(run.run_no, range.after);
      if (first !== undefined) {
        const rows = this.sql(`SELECT step, record FROM checkpoints WHERE id >= ${checkpointKey('?', '?')} AND id < ${checkpointKey('?', String(MAX_VERSIONS))} ORDER BY id`)
          .iterate(run.run_no, first, run.run_no) as IterableIterator<{ step: number; record: string | null }>;
        for (const row of rows) {
          if (row.step > range.through) break;
          if (row.record !== null && row.step > range.after) found.push({ step: row.step, record: row.record });
        }
      }
      // A fork's, pruned rows' and older code's records, keyed by step.
      found.push(...this.sql(`SELECT step, record FROM steps WHERE id > ${stepKey('?', '?')} AND id <= ${stepKey('?', '?')} AND record IS NOT NULL`)
        .all(run.run_no, range.after, run.run_no, range.through) as { step: number; record: string }[]);
      return found.sort((a, b) => a.step - b.step).map((r) => r.record);
    });
  }

  /**
   * The first version of the run numbered `runNo` whose step is past `step`, or undefined. A run's step never
   * goes down from one version to the next, so halving the versions finds it in a few key lookups, where a
   * scan from either end read every row between (a run of 50,000 steps, shown at its step 100).
   */
  private firstVersionPast(runNo: number, step: number): number | undefined {
    // The first row at or after a version: pruning leaves gaps in a run's versions.
    const at = this.sql(`SELECT version, step FROM checkpoints WHERE id >= ${checkpointKey('?', '?')} AND id < ${checkpointKey('?', String(MAX_VERSIONS))} ORDER BY id LIMIT 1`);
    const rowAt = (version: number) => at.get(runNo, version, runNo) as { version: number; step: number } | undefined;
    let low = 1;
    let high = (this.sql(`SELECT max(version) AS version FROM checkpoints WHERE id >= ${checkpointKey('?', '1')} AND id < ${checkpointKey('?', String(MAX_VERSIONS))}`).get(runNo, runNo) as { version: number | null }).version;
    if (high === null || rowAt(high)!.step <= step) return undefined;
    // Invariant: the row at or after `high` is past `step`.
    while (low < high) {
      const middle = Math.floor((low + high) / 2);
      if (rowAt(middle)!.step > step) high = middle;
      else low = middle + 1;
    }
    return rowAt(low)!.version;
  }

  async waitingFor(type: string, key: string): Promise<OpenWait[]> {
    const rows = this.sql("SELECT run_id, agent, version, wait_id, wait_deadline FROM runs WHERE wait_event = ? AND status = 'waiting'")
      .all(waitEventKey(type, key)) as WaitRow[];
    return rows.map(openWait);
  }

  async dueWaits(before: number, limit = 100, agents?: readonly string[], after?: WaitPosition): Promise<OpenWait[]> {
    const only = agents ? ` AND agent IN (SELECT value FROM json_each(?))` : '';
    const past = after ? ' AND (wait_deadline > ? OR (wait_deadline = ? AND run_id > ?))' : '';
    const rows = this.sql(`SELECT run_id, agent, version, wait_id, wait_deadline FROM runs WHERE wait_deadline <= ? AND status = 'waiting'${past}${only} ORDER BY wait_deadline, run_id LIMIT ?`)
      .all(before, ...(after ? [after.deadline, after.deadline, after.runId] : []), ...(agents ? [JSON.stringify(agents)] : []), limit) as WaitRow[];
    return rows.map(openWait);
  }

  async list(query: ListRunsQuery = {}): Promise<RunSummary[]> {
    const args: unknown[] = [];
    const where: string[] = [];
    if (query.status) { where.push('r.status = ?'); args.push(query.status); }
    // A run that is not running has its latest version, step and update in its runs row (its last commit
    // changed its status), so those are listed from it alone, in updated_at order from its index (the
    // status spelled out lets SQLite use it). A running run's are in its newest checkpoint row.
    const ended = query.status !== undefined && query.status !== 'running';
    if (ended) where.push("r.status <> 'running'");
    const updated = ended ? 'r.updated_at' : 'c.created_at';
    if (query.updatedBefore !== undefined) { where.push(`${updated} < ?`); args.push(query.updatedBefore); }
    if (query.updatedAfter !== undefined) { where.push(`${updated} > ?`); args.push(query.updatedAfter); }
    if (query.after) {
      where.push(`(${updated} < ? OR (${updated} = ? AND r.run_id < ?))`);
      args.push(query.after.updatedAt, query.after.updatedAt, query.after.runId);
    }
    // Ties by run id (lib/core/run-order.ts), so that a page that ends inside a millisecond is followed by
    // the rest of it.
    const sql = `SELECT r.run_id, ${ended ? 'r.version, r.step' : 'c.version, c.step'}, r.status, r.agent, r.reason, ${updated} AS updated_at FROM runs r
      ${ended ? '' : `JOIN checkpoints c ON c.id = ${newestCheckpointOf('r.run_no')}`}
      ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY ${updated} DESC, r.run_id DESC LIMIT ?`;
    const rows = this.sql(sql).all(...args, query.limit ?? 100) as RunRow[];
    return rows.map((r) => ({
      runId: r.run_id, version: r.version, status: r.status, step: r.step, agent: r.agent, updatedAt: r.updated_at,
      ...(r.reason ? { reason: r.reason } : {}),
    }));
  }

  async deleteRun(runId: string, expectedVersion?: number): Promise<boolean> {
    // One transaction: nothing is left behind to finish, so there is never an interrupted delete to find.
    if (expectedVersion === undefined) return false;
    const deleted = immediate(this.db, () => {
      const current = this.sql(FENCE).get(runId) as Fence | undefined;
      if (!current) throw new StaleVersionError(runId, expectedVersion, 'no such run');
      if (current.version !== expectedVersion || !isTerminal(current.status)) throw new StaleVersionError(runId, expectedVersion, `it is ${current.status} at version ${current.version}`);
      // The keys under the run's prefix: from the prefix up to the prefix with its slash raised to the next
      // character, a range of the ledger's key index.
      const prefix = idempotencyKeyPrefix(runId);
      const keys = [prefix, `${prefix.slice(0, -1)}0`];
      this.refuseLiveClaim(runId, current.status, keys);
      // All of one run, in one transaction, however long it is: a run of 20,000 steps holds the write
      // lock for a fraction of a second, and no step of another run waits on it for longer than its own
      // commit would; split, an interrupted delete would leave a run with part of its records.
      this.sql(`DELETE FROM checkpoints WHERE ${checkpointsOfRun('checkpoints', 'CAST(? AS INTEGER)')}`).run(current.run_no, current.run_no);
      this.sql(`DELETE FROM steps WHERE ${stepsOfRun('steps', 'CAST(? AS INTEGER)')}`).run(current.run_no, current.run_no);
      this.sql('DELETE FROM summaries WHERE run_id = ?').run(runId);
      // Its queue row too (acked, it is the tombstone that deduplicates sends): left, it would swallow the
      // first send of a new run of this id, which would never take a step.
      this.sql('DELETE FROM queue WHERE run_id = ?').run(runId);
      this.sql('DELETE FROM ledger WHERE key >= ? AND key < ?').run(...keys);
      this.sql('DELETE FROM runs WHERE run_id = ?').run(runId);
      return true;
    });
    if (this.lastStep?.runId === runId) this.lastStep = undefined;
    return deleted;
  }

  /**
   * An effect of the run still running (a tool's timeoutMs ended its try, or the run failed or was
   * cancelled, while the effect went on) holds its key's claim: deleted, the claim would let a new run of
   * the id apply the effect again beside it. Judged as the ledger's next claim of the key judges it
   * (ledger-claims.ts), in the delete's transaction, so no claim is taken or renewed between the look and
   * the delete. A claim whose lease ran out is a dead holder's, or a frozen one's, whose completion finds
   * its run gone and writes nothing (sqlite-ledger.ts).
   */
  private refuseLiveClaim(runId: string, status: RunStatus, keys: string[]): void {
    const claims = this.sql("SELECT key, owner, lease_until, updated_at, machine_boot, machine_until, machine_owner FROM ledger WHERE key >= ? AND key < ? AND status = 'in_progress'")
      .all(...keys) as (ClaimLease & { key: string })[];
    if (!claims.length) return;
    const clock = this.options.clock ?? systemClock;
    const now = clock.now();
    const machine = clock.machineTime?.();
    for (const claim of claims) {
      const left = claimLeftMs(claim, now, machine);
      if (left > 0) throw new EffectStillRunningError(runId, status, claim.key, now + left, retryAfterMs(now + left, now));
    }
  }

  /**
   * Deletes checkpoint versions past the retention window they were written with (or, with `olderThanMs`,
   * written longer ago than that), never a run's latest: it holds the run, with the step records and the
   * recorded decision, which are never pruned (a deleted row's record moves to the steps table first, in
   * the same transaction). Returns rows removed.
   *
   * In batches of `batch` rows (PRUNE_BATCH), each found by a read, which takes no lock, and deleted in a
   * transaction of its own: one transaction over the whole table held the write lock, and every worker's
   * step with it, for as long as the scan took (2.5 s at 63,000 versions; past the 10 s busy timeout a
   * step failed as locked), and grew the WAL by all it deleted. `onBatch` is told each batch once it has
   * committed, with the write lock free.
   */
  prune(options: { olderThanMs?: number; batch?: number; onBatch?: (deleted: number) => void } = {}): number {
    const expired = options.olderThanMs !== undefined ? 'created_at < :before' : 'expires_at < :before';
    const prunable = `${expired} AND id < ${newestCheckpointOf('checkpoints.run_no')}`;
    const before = options.olderThanMs !== undefined ? this.now - options.olderThanMs : this.now;
    const batch = options.batch ?? PRUNE_BATCH;
    // A row found prunable stays so: its run's newer version stays newer, and its times do not change.
    // The delete checks it again all the same, as it checks that the row is still there.
    const chosen = `id IN (SELECT value FROM json_each(:ids)) AND ${prunable}`;
    let total = 0;
    // Keys as BigInt: past 2^21 runs they are beyond a JavaScript number's exact integers.
    const find = this.sql(`SELECT id FROM checkpoints WHERE id > :after AND ${prunable} ORDER BY id LIMIT :batch`).safeIntegers(true);
    for (let after = -1n; ;) {
      const ids = (find.all({ before, after, batch }) as { id: bigint }[]).map((r) => r.id);
      if (!ids.length) return total;
      const list = `[${ids.join(',')}]`;
      const deleted = immediate(this.db, () => {
        this.sql(
          `INSERT INTO steps (id, run_no, run_id, step, record) SELECT ${stepKey('run_no', 'step')}, run_no, run_id, step, record FROM checkpoints WHERE record IS NOT NULL AND ${chosen}
           ON CONFLICT (id) DO UPDATE SET record = excluded.record WHERE steps.record IS NULL`,
        ).run({ before, ids: list });
        return this.sql(`DELETE FROM checkpoints WHERE ${chosen}`).run({ before, ids: list }).changes;
      });
      total += deleted;
      options.onBatch?.(deleted);
      if (ids.length < batch) return total;
      after = ids.at(-1)!;
    }
  }

  private assertVersion(runId: string, expectedVersion: number): void {
    if (this.latestVersion(runId) !== expectedVersion) throw new StaleVersionError(runId, expectedVersion);
  }

  private insertCheckpoint(runNo: number, runId: string, version: number, state: RunState, head: string, bytes: number, meta: WriteMeta, appended: CheckpointWrite['appended'], record: string | undefined, now: number): void {
    this.sql(INSERT_CHECKPOINT).run(runNo, version, runNo, runId, version, state.step, state.status, appended?.tool ?? null, appended?.idempotencyKey ?? null, meta.workerId, meta.codeVersion, bytes, record ?? null, head, state.reason ?? null, now, now + this.retentionMs);
  }
}

interface HeadRow { version: number; status: RunStatus; step: number; reason: string | null; updated_at: number; restarts: number; restarts_at: number | null; cancel_requested: string | null; head: string; worker_id: string; pending: string | null }

function stored(runId: string, row: HeadRow, steps: string[], after: number, summaries?: string[]): StoredCheckpoint {
  // Restarts count for the version they were counted at (addRestarts).
  const restarts = row.restarts_at === row.version ? row.restarts : 0;
  // Fields set one by one, not spread from conditional objects: this runs at every step's load.
  const checkpoint: StoredCheckpoint = { runId, version: row.version, status: row.status, head: row.head, steps, workerId: row.worker_id, updatedAt: row.updated_at };
  if (after) checkpoint.stepsAfter = after;
  if (summaries) checkpoint.summaries = summaries;
  if (row.pending) checkpoint.pending = row.pending;
  if (row.reason) checkpoint.reason = row.reason;
  if (restarts) checkpoint.restarts = restarts;
  if (row.cancel_requested !== null) checkpoint.cancelRequested = row.cancel_requested;
  return checkpoint;
}

/**
 * A running run's step as this connection's commit wrote it, with the file's write marks taken after its
 * writes: its head row, its number, and the queue row it handed over (HeldRow), if it did.
 */
interface LastStep { runId: string; row: HeadRow; runNo: number; marks: WriteMarks; held?: HeldRow }

/** What a commit is fenced on (FENCE). */
interface Fence { status: RunStatus; reason: string | null; run_no: number; cancel_requested: string | null; version: number }

const sameMarks = (a: WriteMarks, b: WriteMarks): boolean => a.changes === b.changes && a.version === b.version;

/** Type and key in one indexed column; a newline cannot occur in either (EVENT_NAME). */
const waitEventKey = (type: string, key: string): string => `${type}\n${key}`;

interface WaitRow { run_id: string; agent: string; version: number; wait_id: string; wait_deadline: number }

function openWait(row: WaitRow): OpenWait {
  return { runId: row.run_id, agent: row.agent, version: row.version, waitId: row.wait_id, deadline: row.wait_deadline };
}
