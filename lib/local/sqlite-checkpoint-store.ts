import type * as Codec from '../core/codec.ts';
import type { StoredCheckpoint } from '../core/codec.ts';
import { CONDENSE_BLOCK, condensedBlocks } from '../core/condense.ts';
import { StaleVersionError } from '../core/errors.ts';
import { DEFAULT_RETENTION_MS } from '../core/retention.ts';
import type { Decision, RunState } from '../core/state.ts';
import { isTerminal, type RunStatus } from '../core/statuses.ts';
import type {
  CheckpointInfo, CheckpointStore, CheckpointWrite, Clock, CommitResult, Delivery, ListRunsQuery, OpenWait, RunSummary, WriteMeta,
} from '../ports.ts';
import { systemClock } from '../ports.ts';
import type Database from 'better-sqlite3';
import { immediate, preparedOnce, reading, type Db } from './database.ts';
import { encodeBlob, writeBlob } from './sqlite-blob-store.ts';
import { ackReceipt, enqueue, enqueueReceived, takeVisible } from './sqlite-queue.ts';

export { DEFAULT_RETENTION_MS } from '../core/retention.ts';

/**
 * The encoders, imported at the first write (one resolved promise per write after that): a process that
 * only reads, like `stepwise status`, then never loads the state schemas and zod, most of its start time.
 */
let codec: Promise<typeof Codec> | undefined;
const encoders = (): Promise<typeof Codec> => (codec ??= import('../core/codec.ts'));

interface RunRow { run_id: string; version: number; status: RunStatus; step: number; agent: string; reason: string | null; updated_at: number }

/**
 * Checkpoints in SQLite. A write is one transaction: bump runs.version only if it still equals the version
 * the writer read (the fence), insert the new checkpoint row, and write the step record once.
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
  /** `carriesBlobs`: the runtime's blob store reads this file's blobs table, so a commit may write the step's blob. */
  readonly carriesBlobs: boolean;

  private sql(text: string): Database.Statement {
    return preparedOnce(this.db)(text);
  }

  private get now(): number {
    return (this.options.clock ?? systemClock).now();
  }

  private get retentionMs(): number {
    return this.options.retentionMs ?? DEFAULT_RETENTION_MS;
  }

  async create(state: RunState, meta: WriteMeta): Promise<{ created: boolean; version: number; bytes: number }> {
    const { encodeHead, encodeStep } = await encoders();
    const head = encodeHead(state);
    return immediate(this.db, () => {
      const existing = this.sql('SELECT version FROM runs WHERE run_id = ?').get(state.runId) as { version: number } | undefined;
      if (existing) return { created: false, version: existing.version, bytes: 0 };
      const now = this.now;
      this.sql('INSERT INTO runs (run_id, version, status, step, agent, reason, created_at, updated_at) VALUES (?, 1, ?, ?, ?, NULL, ?, ?)')
        .run(state.runId, state.status, state.step, state.agent, now, now);
      // A fork's first steps become this run's own rows, in the same transaction as its head.
      let bytes = Buffer.byteLength(head);
      for (const record of state.steps) {
        const text = encodeStep(record);
        this.sql('INSERT INTO steps (run_id, step, record) VALUES (?, ?, ?)').run(state.runId, record.step, text);
        bytes += Buffer.byteLength(text);
      }
      this.insertCheckpoint(state.runId, 1, state, head, bytes, meta, undefined, now);
      return { created: true, version: 1, bytes };
    });
  }

  async load(runId: string, options: { afterStep?: number; recent?: boolean } = {}): Promise<StoredCheckpoint | undefined> {
    // One read transaction, so the head, the summaries and the step rows come from the same moment.
    return reading(this.db, () => {
      // The decision recorded for the next step comes with the head: a step row whose record is not written yet.
      const row = this.sql(
        'SELECT r.version, r.status, r.step, r.reason, r.updated_at, r.restarts, r.cancel_requested, c.head, c.worker_id, '
        + '(SELECT s.decision FROM steps s WHERE s.run_id = r.run_id AND s.step = r.step + 1 AND s.record IS NULL) AS pending '
        + 'FROM runs r JOIN checkpoints c ON c.run_id = r.run_id AND c.version = r.version WHERE r.run_id = ?',
      ).get(runId) as { version: number; status: RunStatus; step: number; reason: string | null; updated_at: number; restarts: number; cancel_requested: string | null; head: string; worker_id: string; pending: string | null } | undefined;
      if (!row) return undefined;
      const summaries = options.recent ? this.summariesOf(runId, row.step) : undefined;
      const after = Math.max(options.afterStep ?? 0, summaries?.through ?? 0);
      // The records are written with the heads, so none lies past the run's step: a caller that holds them
      // all (a worker's next step) has nothing to read. Past it, any record there is read, for decoding to refuse.
      const steps = row.step <= after ? [] : (this.sql('SELECT record FROM steps WHERE run_id = ? AND step > ? AND record IS NOT NULL ORDER BY step')
        .all(runId, after) as { record: string }[]).map((s) => s.record);
      const pending = row.pending ?? undefined;
      return {
        runId, version: row.version, status: row.status, head: row.head, steps, ...(after ? { stepsAfter: after } : {}),
        ...(summaries ? { summaries: summaries.texts } : {}),
        ...(pending ? { pending } : {}), workerId: row.worker_id, updatedAt: row.updated_at,
        ...(row.reason ? { reason: row.reason } : {}), ...(row.restarts ? { restarts: row.restarts } : {}),
        ...(row.cancel_requested !== null ? { cancelRequested: row.cancel_requested } : {}),
      };
    });
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

  async addRestarts(runId: string, expectedVersion: number, delta: number): Promise<number> {
    return immediate(this.db, () => {
      // Fenced like every write, but the version stays: this is not a checkpoint.
      const row = this.sql('UPDATE runs SET restarts = restarts + ? WHERE run_id = ? AND version = ? RETURNING restarts')
        .get(delta, runId, expectedVersion) as { restarts: number } | undefined;
      if (!row) throw new StaleVersionError(runId, expectedVersion);
      return row.restarts;
    });
  }

  async requestCancel(runId: string, expectedVersion: number, request: string): Promise<void> {
    immediate(this.db, () => {
      // Fenced, but not a checkpoint: the version stays, so a step running now still commits.
      const updated = this.sql('UPDATE runs SET cancel_requested = ? WHERE run_id = ? AND version = ?').run(request, runId, expectedVersion);
      if (updated.changes === 0) throw new StaleVersionError(runId, expectedVersion);
    });
  }

  async recordDecision(runId: string, expectedVersion: number, decision: Decision): Promise<void> {
    const { encodeDecision } = await encoders();
    immediate(this.db, () => {
      this.assertVersion(runId, expectedVersion);
      const inserted = this.sql('INSERT INTO steps (run_id, step, decision) VALUES (?, ?, ?) ON CONFLICT DO NOTHING')
        .run(runId, decision.step, encodeDecision(decision));
      if (inserted.changes === 0) throw new StaleVersionError(runId, expectedVersion, `step ${decision.step} already has a decision`);
    });
  }

  async commit(write: CheckpointWrite): Promise<CommitResult> {
    const { encodeHead, encodeStep, encodeSummary } = await encoders();
    const head = encodeHead(write.state);
    const step = write.appended ? encodeStep(write.appended) : undefined;
    const summaries = (write.summaries ?? []).map((block) => ({ block, text: encodeSummary(block) }));
    const bytes = Buffer.byteLength(head) + (step ? Buffer.byteLength(step) : 0) + summaries.reduce((n, s) => n + Buffer.byteLength(s.text), 0);
    if (write.blobs?.length && !this.carriesBlobs) throw new Error('this checkpoint store was not opened with the blobs: it cannot carry them');
    const blobs = write.blobs?.map((b) => encodeBlob(b.ref, b.data));
    return immediate(this.db, () => {
      const now = this.now;
      // Most commits are a running run's next step: written without touching its status or wait columns,
      // so no index of the runs table changes (a column in an UPDATE's SET list rewrites its index entries,
      // same value or not). Any other commit, or a run that was not running, takes the full update.
      const stillRunning = write.state.status === 'running' && !write.state.reason
        && this.sql('UPDATE runs SET version = version + 1, step = ?, updated_at = ?, restarts = 0 WHERE run_id = ? AND version = ? AND status = \'running\' AND reason IS NULL')
          .run(write.state.step, now, write.runId, write.expectedVersion).changes > 0;
      if (!stillRunning) {
        const wait = write.state.status === 'waiting' ? write.state.wait : undefined;
        const updated = this.sql(
          // A cancel request stays until the run ends, however it ends.
          'UPDATE runs SET version = version + 1, status = ?, step = ?, reason = ?, updated_at = ?, wait_id = ?, wait_event = ?, wait_deadline = ?, restarts = 0, cancel_requested = CASE WHEN ? THEN NULL ELSE cancel_requested END WHERE run_id = ? AND version = ?',
        ).run(
          write.state.status, write.state.step, write.state.reason ?? null, now,
          wait?.id ?? null, wait?.event ? waitEventKey(wait.event.type, wait.event.key) : null, wait?.deadline ?? null,
          isTerminal(write.state.status) ? 1 : 0, write.runId, write.expectedVersion,
        );
        if (updated.changes === 0) throw new StaleVersionError(write.runId, write.expectedVersion);
      }
      const version = write.expectedVersion + 1;
      if (write.appended && step) {
        const stored = this.sql(
          'INSERT INTO steps (run_id, step, record) VALUES (?, ?, ?) ON CONFLICT (run_id, step) DO UPDATE SET record = excluded.record WHERE steps.record IS NULL',
        ).run(write.runId, write.appended.step, step);
        // Unreachable while the fence holds; if it ever fails, roll back rather than rewrite history.
        if (stored.changes === 0) throw new StaleVersionError(write.runId, write.expectedVersion, `step ${write.appended.step} is already recorded`);
      }
      // Written once: a summary stored already (the same block's) stays as it is.
      for (const { block, text } of summaries) {
        this.sql('INSERT INTO summaries (run_id, last_step, summary) VALUES (?, ?, ?) ON CONFLICT DO NOTHING').run(write.runId, block.last, text);
      }
      // Before the record that refers to it is visible, in the same transaction: no record without its blob.
      for (const blob of blobs ?? []) writeBlob((text) => this.sql(text), blob, now);
      this.insertCheckpoint(write.runId, version, write.state, head, bytes, write, write.appended, now);
      // The step's queue work, in the same transaction: a crash leaves all of it or none of it.
      let received: Delivery[] | undefined;
      if (write.queue) {
        if (!this.carriesQueueWork) throw new Error('this checkpoint store was not opened with the queue: it cannot carry queue work');
        const prepare = (text: string) => this.sql(text);
        const { send, ack, receive } = write.queue;
        if (ack) ackReceipt(prepare, ack, now);
        // The next step's message, received already when it is what the receive would take.
        if (send && receive) received = enqueueReceived(prepare, send, receive, now);
        if (send && !received) enqueue(prepare, send.message, send.delayMs ?? 0, now);
        // After the send, so the message just sent is taken only if nothing older is visible.
        if (receive && !received) received = takeVisible(prepare, receive, now);
      }
      return { version, bytes, head, ...(received ? { received } : {}) };
    });
  }

  async markUnreadable(runId: string, expectedVersion: number, reason: string, meta: WriteMeta): Promise<CommitResult> {
    return immediate(this.db, () => {
      const now = this.now;
      const updated = this.sql("UPDATE runs SET version = version + 1, status = 'failed', reason = ?, updated_at = ?, restarts = 0, cancel_requested = NULL WHERE run_id = ? AND version = ?")
        .run(reason, now, runId, expectedVersion);
      if (updated.changes === 0) throw new StaleVersionError(runId, expectedVersion);
      // The unreadable head is kept as it was: nothing is lost, an operator can inspect or repair it.
      const previous = this.sql('SELECT step, head FROM checkpoints WHERE run_id = ? AND version = ?').get(runId, expectedVersion) as { step: number; head: string };
      const version = expectedVersion + 1;
      this.sql(
        "INSERT INTO checkpoints (run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, head, reason, created_at, expires_at) VALUES (?, ?, ?, 'failed', NULL, NULL, ?, ?, 0, ?, ?, ?, ?)",
      ).run(runId, version, previous.step, meta.workerId, meta.codeVersion, previous.head, reason, now, now + this.retentionMs);
      return { version, bytes: 0 };
    });
  }

  async history(runId: string): Promise<CheckpointInfo[]> {
    const rows = this.sql(
      'SELECT run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, created_at FROM checkpoints WHERE run_id = ? ORDER BY version',
    ).all(runId) as { run_id: string; version: number; step: number; status: RunStatus; tool: string | null; idempotency_key: string | null; worker_id: string; code_version: string; bytes: number; created_at: number }[];
    return rows.map((r) => ({
      runId: r.run_id, version: r.version, step: r.step, status: r.status,
      ...(r.tool ? { tool: r.tool } : {}), ...(r.idempotency_key ? { idempotencyKey: r.idempotency_key } : {}),
      workerId: r.worker_id, codeVersion: r.code_version, bytes: r.bytes, at: r.created_at,
    }));
  }

  async waitingFor(type: string, key: string): Promise<OpenWait[]> {
    const rows = this.sql("SELECT run_id, agent, version, wait_id, wait_deadline FROM runs WHERE wait_event = ? AND status = 'waiting'")
      .all(waitEventKey(type, key)) as WaitRow[];
    return rows.map(openWait);
  }

  async dueWaits(before: number, limit = 100): Promise<OpenWait[]> {
    const rows = this.sql("SELECT run_id, agent, version, wait_id, wait_deadline FROM runs WHERE wait_deadline <= ? AND status = 'waiting' ORDER BY wait_deadline LIMIT ?")
      .all(before, limit) as WaitRow[];
    return rows.map(openWait);
  }

  async list(query: ListRunsQuery = {}): Promise<RunSummary[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (query.status) { where.push('status = ?'); args.push(query.status); }
    // Spelled out, so SQLite may read the runs that are not running in updated_at order from their index.
    if (query.status && query.status !== 'running') where.push("status <> 'running'");
    if (query.updatedBefore !== undefined) { where.push('updated_at < ?'); args.push(query.updatedBefore); }
    const sql = `SELECT run_id, version, status, step, agent, reason, updated_at FROM runs ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY updated_at DESC LIMIT ?`;
    const rows = this.sql(sql).all(...args, query.limit ?? 100) as RunRow[];
    return rows.map((r) => ({
      runId: r.run_id, version: r.version, status: r.status, step: r.step, agent: r.agent, updatedAt: r.updated_at,
      ...(r.reason ? { reason: r.reason } : {}),
    }));
  }

  /**
   * Deletes checkpoint versions past the retention window they were written with (or, with `olderThanMs`,
   * written longer ago than that), never a run's latest: it holds the run, with the step records and the
   * recorded decision, which are never pruned. Returns rows removed.
   */
  prune(options: { olderThanMs?: number } = {}): number {
    const latest = 'version < (SELECT r.version FROM runs r WHERE r.run_id = checkpoints.run_id)';
    if (options.olderThanMs !== undefined) {
      return this.sql(`DELETE FROM checkpoints WHERE created_at < ? AND ${latest}`).run(this.now - options.olderThanMs).changes;
    }
    return this.sql(`DELETE FROM checkpoints WHERE expires_at < ? AND ${latest}`).run(this.now).changes;
  }

  private assertVersion(runId: string, expectedVersion: number): void {
    const row = this.sql('SELECT version FROM runs WHERE run_id = ?').get(runId) as { version: number } | undefined;
    if (!row || row.version !== expectedVersion) throw new StaleVersionError(runId, expectedVersion);
  }

  private insertCheckpoint(runId: string, version: number, state: RunState, head: string, bytes: number, meta: WriteMeta, appended: CheckpointWrite['appended'], now: number): void {
    this.sql(
      'INSERT INTO checkpoints (run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, head, reason, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    ).run(runId, version, state.step, state.status, appended?.tool ?? null, appended?.idempotencyKey ?? null, meta.workerId, meta.codeVersion, bytes, head, state.reason ?? null, now, now + this.retentionMs);
  }
}

/** Type and key in one indexed column; a newline cannot occur in either (EVENT_NAME). */
const waitEventKey = (type: string, key: string): string => `${type}\n${key}`;

interface WaitRow { run_id: string; agent: string; version: number; wait_id: string; wait_deadline: number }

function openWait(row: WaitRow): OpenWait {
  return { runId: row.run_id, agent: row.agent, version: row.version, waitId: row.wait_id, deadline: row.wait_deadline };
}
