import type { Db } from '../../lib/local/database.ts';

/**
 * A step record where the local store keeps it: in the checkpoint row that appended it, or in the steps
 * table (a fork's first steps, a pruned row's, a file of older code's). For tests that tamper with one.
 */
export function readRecord(db: Db, runId: string, step: number): string {
  const row = (db.prepare('SELECT record FROM checkpoints WHERE run_id = ? AND step = ? AND record IS NOT NULL').get(runId, step)
    ?? db.prepare('SELECT record FROM steps WHERE run_id = ? AND step = ? AND record IS NOT NULL').get(runId, step)) as { record: string } | undefined;
  if (!row) throw new Error(`no record of step ${step} of ${runId}`);
  return row.record;
}

/** Rewrites a step record where it is kept (see readRecord). */
export function writeRecord(db: Db, runId: string, step: number, record: string): void {
  const changes = db.prepare('UPDATE checkpoints SET record = ? WHERE run_id = ? AND step = ? AND record IS NOT NULL').run(record, runId, step).changes
    + db.prepare('UPDATE steps SET record = ? WHERE run_id = ? AND step = ? AND record IS NOT NULL').run(record, runId, step).changes;
  if (changes !== 1) throw new Error(`step ${step} of ${runId} has ${changes} records`);
}

/** The step of the run's newest checkpoint: its latest step, whose runs row a running run's steps leave. */
export function latestStep(db: Db, runId: string): number | undefined {
  return (db.prepare('SELECT step FROM checkpoints WHERE run_id = ? ORDER BY version DESC LIMIT 1').get(runId) as { step: number } | undefined)?.step;
}

/** Deletes one checkpoint row as pruning would: its step's record moved to the steps table first. */
export function pruneCheckpointRow(db: Db, runId: string, version: number): void {
  db.prepare(`INSERT INTO steps (id, run_no, run_id, step, record) SELECT run_no * ${2 ** 32} + step, run_no, run_id, step, record FROM checkpoints WHERE run_id = ? AND version = ? AND record IS NOT NULL
    ON CONFLICT (id) DO UPDATE SET record = excluded.record`).run(runId, version);
  db.prepare('DELETE FROM checkpoints WHERE run_id = ? AND version = ?').run(runId, version);
}
