import { isTerminal } from '../../core/statuses.ts';
import type { CheckpointStore, ListRunsQuery, RunSummary } from '../../ports.ts';

/** A row of the run table: the store's summary, and for a live run this code cannot resume, what it needs. */
export type RunRow = RunSummary & { needs?: string };

/** Loads in flight at once while checking live runs' formats: enough to hide a DynamoDB round trip. */
const CONCURRENCY = 16;

/**
 * The runs the store lists, each running or waiting one checked for records this code cannot read: a run
 * written by newer code keeps its status (nothing rewrites it), so without this the table would show it
 * as running while no worker of this version can move it. The check reads the head, the last step record
 * and the pending decision (what the newest writer wrote), not the whole run.
 */
export async function listRuns(store: CheckpointStore, query: ListRunsQuery): Promise<RunRow[]> {
  const runs: RunRow[] = await store.list(query);
  const live = runs.filter((run) => !isTerminal(run.status));
  if (!live.length) return runs;
  // The record schemas (and zod) load only when there is a run to check: a table of finished runs needs neither.
  const { formatNeeds } = await import('../../core/codec.ts');
  for (let i = 0; i < live.length; i += CONCURRENCY) {
    await Promise.all(live.slice(i, i + CONCURRENCY).map(async (run) => {
      const stored = await store.load(run.runId, { afterStep: Math.max(0, run.step - 1) });
      const needs = stored && formatNeeds(stored);
      if (needs) run.needs = needs;
    }));
  }
  return runs;
}
