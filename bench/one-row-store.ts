/**
 * A prototype, for bench/step-layouts.ts only: the leanest checkpoint store of one row per version, in one
 * b-tree keyed (run, version), the head and the step's record in it, the key's uniqueness the fence. The
 * local store writes a running run's step that way too, with the history's metadata in the row and the
 * fence's read of its runs row; this one has neither, so it bounds what that layout can give the engine
 * step with the engine's work as it is: advance() runs on it unchanged, with this code's own encoding.
 *
 * Only what a running run's read-only steps need is here: create, load (the head and the records after
 * those the caller holds) and commit. The rest of the port throws: no decisions, restarts, cancels, waits,
 * history, listing, cold resumes of condensed runs, queue work or blobs. Not a store to run agents on.
 */
import type Database from 'better-sqlite3';
import { encodeHead, encodeStep, encodeSummary, type StoredCheckpoint } from '../lib/core/codec.ts';
import { StaleVersionError } from '../lib/core/errors.ts';
import type { CondensedBlock, RunState, RunStatus } from '../lib/core/state.ts';
import type { CheckpointStore, CheckpointWrite, CommitResult, WriteMeta } from '../lib/ports.ts';
import { durable } from './support.ts';

const SCHEMA = `
CREATE TABLE rows (
  run_id    TEXT NOT NULL,
  version   INTEGER NOT NULL,
  status    TEXT NOT NULL,
  step      INTEGER NOT NULL,
  head      TEXT NOT NULL,
  record    TEXT,
  worker_id TEXT NOT NULL,
  PRIMARY KEY (run_id, version)
) WITHOUT ROWID;
-- Written once per condensed block (every 100 steps), never read here: a cold resume is not prototyped.
CREATE TABLE summaries (run_id TEXT NOT NULL, last_step INTEGER NOT NULL, summary TEXT NOT NULL, PRIMARY KEY (run_id, last_step)) WITHOUT ROWID;
`;

const notPrototyped = (what: string) => async (): Promise<never> => {
  throw new Error(`bench/one-row-store.ts: ${what} is not prototyped`);
};

export function openOneRowStore(path: string): { store: CheckpointStore; db: Database.Database } {
  const db = durable(path, SCHEMA);
  const latest = db.prepare('SELECT version, status, step, head, worker_id FROM rows WHERE run_id = ? ORDER BY version DESC LIMIT 1');
  const records = db.prepare('SELECT record FROM rows WHERE run_id = ? AND step > ? AND record IS NOT NULL ORDER BY version');
  const insert = db.prepare('INSERT INTO rows (run_id, version, status, step, head, record, worker_id) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const summary = db.prepare('INSERT INTO summaries (run_id, last_step, summary) VALUES (?, ?, ?) ON CONFLICT DO NOTHING');
  // Made once, as lib/local/database.ts does: better-sqlite3 builds four wrapper functions per transaction() call.
  const write = db.transaction((runId: string, version: number, state: RunState, head: string, record: string | null, workerId: string, blocks: readonly CondensedBlock[] = []) => {
    insert.run(runId, version, state.status, state.step, head, record, workerId);
    for (const block of blocks) summary.run(runId, block.last, encodeSummary(block));
  });

  const store: CheckpointStore = {
    async create(state: RunState, meta: WriteMeta) {
      if (state.steps.length) throw new Error('bench/one-row-store.ts: a fork is not prototyped');
      const head = encodeHead(state);
      try {
        write(state.runId, 1, state, head, null, meta.workerId);
      } catch (error) {
        if ((error as { code?: string }).code !== 'SQLITE_CONSTRAINT_PRIMARYKEY') throw error;
        return { created: false, version: (latest.get(state.runId) as { version: number }).version, bytes: 0 };
      }
      return { created: true, version: 1, bytes: Buffer.byteLength(head) };
    },

    async load(runId, options = {}): Promise<StoredCheckpoint | undefined> {
      const row = latest.get(runId) as { version: number; status: RunStatus; step: number; head: string; worker_id: string } | undefined;
      if (!row) return undefined;
      const after = options.afterStep ?? 0;
      if (options.recent && row.step > 0) throw new Error('bench/one-row-store.ts: a cold resume is not prototyped');
      const steps = row.step <= after ? [] : (records.all(runId, after) as { record: string }[]).map((r) => r.record);
      return { runId, version: row.version, status: row.status, head: row.head, steps, ...(after ? { stepsAfter: after } : {}), workerId: row.worker_id, updatedAt: 0 };
    },

    async commit(w: CheckpointWrite): Promise<CommitResult> {
      if (w.queue || w.blobs?.length) throw new Error('bench/one-row-store.ts: queue work and blobs are not prototyped');
      const head = encodeHead(w.state);
      const record = w.appended ? encodeStep(w.appended) : null;
      const version = w.expectedVersion + 1;
      try {
        // The fence: every writer inserts the version after the one it read, so a stale one finds it taken.
        write(w.runId, version, w.state, head, record, w.workerId, w.summaries);
      } catch (error) {
        if ((error as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new StaleVersionError(w.runId, w.expectedVersion);
        throw error;
      }
      return { version, bytes: Buffer.byteLength(head) + (record ? Buffer.byteLength(record) : 0), head };
    },

    recordDecision: notPrototyped('recording a decision'),
    addRestarts: notPrototyped('counting restarts'),
    requestCancel: notPrototyped('cancelling'),
    markUnreadable: notPrototyped('marking a run unreadable'),
    history: notPrototyped('history'),
    waitingFor: notPrototyped('waits'),
    dueWaits: notPrototyped('waits'),
    list: notPrototyped('listing runs'),
  };
  return { store, db };
}
