import { InvalidInputError, StepwiseError } from '../../core/errors.ts';
import type { RunPosition } from '../../core/run-order.ts';
import type { WaitRecord } from '../../core/state.ts';
import { isTerminal } from '../../core/statuses.ts';
import type { CheckpointStore, ListRunsQuery, RunSummary } from '../../ports.ts';

/**
 * A row of the run table: the store's summary; for a live run this code cannot resume, what it needs; for
 * a live run with a cancel not yet applied, the request (the run is still running until a worker applies it);
 * for a waiting run, what it waits for and until when.
 */
export type RunRow = RunSummary & { needs?: string; cancelRequested?: string; wait?: RunWait };

/** A waiting run's wait, as a list shows it: what answers it, and its deadline. */
export type RunWait = Pick<WaitRecord, 'id' | 'kind' | 'step' | 'deadline' | 'approvers' | 'event'>;

/** Loads in flight at once while checking live runs' formats: enough to hide a DynamoDB round trip. */
const CONCURRENCY = 16;

/**
 * The runs the store lists, each running or waiting one checked for records this code cannot read: a run
 * written by newer code keeps its status (nothing rewrites it), so without this the table would show it
 * as running while no worker of this version can move it. The check reads the head, the last step record
 * and the pending decision (what the newest writer wrote), not the whole run. The head read also says
 * whether a cancel waits to be applied, which the store's listing (DynamoDB's status index) does not hold.
 */
export async function listRuns(store: CheckpointStore, query: ListRunsQuery): Promise<RunRow[]> {
  return (await checkRuns(store, query)).map(({ row }) => row);
}

/** A listed run and, when it waits, the wait its head holds whole, or why the head could not be read. */
interface CheckedRun { row: RunRow; head?: Pick<RunSummary, 'version' | 'status'>; wait?: WaitRecord; unreadable?: string }

async function checkRuns(store: CheckpointStore, query: ListRunsQuery): Promise<CheckedRun[]> {
  const checked: CheckedRun[] = (await store.list(query)).map((row) => ({ row }));
  const live = checked.filter(({ row }) => !isTerminal(row.status));
  if (!live.length) return checked;
  // The record schemas (and zod) load only when there is a run to check: a table of finished runs needs neither.
  const { decodeHead, formatNeeds } = await import('../../core/codec.ts');
  for (let i = 0; i < live.length; i += CONCURRENCY) {
    await Promise.all(live.slice(i, i + CONCURRENCY).map(async (run) => {
      const { row } = run;
      const stored = await store.load(row.runId, { afterStep: Math.max(0, row.step - 1) });
      const needs = stored && formatNeeds(stored);
      if (needs) row.needs = needs;
      if (stored?.cancelRequested !== undefined) row.cancelRequested = stored.cancelRequested;
      // The head read may be newer than the listing: GET /waits gives its version, and leaves out a run answered since.
      if (stored) run.head = { version: stored.version, status: stored.status };
      // A waiting run has no reason to show: what it waits for is what an operator needs to move it.
      if (!needs && stored?.status === 'waiting') {
        try { run.wait = decodeHead(stored).wait; } catch (error) {
          // An unreadable head: `show` says why; the list goes on.
          if (!(error instanceof StepwiseError)) throw error;
          run.unreadable = error.message;
        }
        if (run.wait) row.wait = waitOfRow(run.wait);
      }
    }));
  }
  return checked;
}

/** A waiting run's entry in GET /waits: the wait whole, or what this code needs to read it, or why it cannot. */
export type WaitRow = Pick<RunSummary, 'runId' | 'agent' | 'version'> & (WaitRecord | { needs: string } | { error: string });

/**
 * A page of the waiting runs' waits, read as the list reads them (the head, once a run). A run this code
 * cannot read is listed as such, as the run list lists it: one such run failed the whole page.
 */
export async function listWaitsPage(store: CheckpointStore, query: { limit: number; cursor?: string }): Promise<{ waits: WaitRow[]; next?: string }> {
  const listed = await checkRuns(store, { status: 'waiting', limit: query.limit + 1, ...(query.cursor !== undefined ? { after: decodeCursor(query.cursor) } : {}) });
  const runs = listed.slice(0, query.limit);
  const waits: WaitRow[] = [];
  for (const { row, head, wait, unreadable } of runs) {
    // A run answered between the listing and the head read waits no more: it is left out.
    if (!row.needs && head?.status !== 'waiting') continue;
    const at = { runId: row.runId, agent: row.agent, version: row.needs ? row.version : head!.version };
    if (row.needs) waits.push({ ...at, needs: row.needs });
    else if (unreadable !== undefined) waits.push({ ...at, error: unreadable });
    else if (wait) waits.push({ ...at, ...wait });
  }
  const last = runs[runs.length - 1]?.row;
  return listed.length > query.limit && last ? { waits, next: encodeCursor(last) } : { waits };
}

function waitOfRow(wait: WaitRecord): RunWait {
  const row: RunWait = { id: wait.id, kind: wait.kind, step: wait.step, deadline: wait.deadline };
  if (wait.approvers) row.approvers = wait.approvers;
  if (wait.event) row.event = wait.event;
  return row;
}

/**
 * A page of runs, and the cursor of the next when there are more: the API's `next`, the CLI's `--cursor`.
 * One more run than asked for is read, to know.
 */
export async function listRunsPage(
  store: CheckpointStore, query: Omit<ListRunsQuery, 'after' | 'limit'> & { limit: number; cursor?: string },
): Promise<{ runs: RunRow[]; next?: string }> {
  const { cursor, limit, ...rest } = query;
  const listed = await listRuns(store, { ...rest, limit: limit + 1, ...(cursor !== undefined ? { after: decodeCursor(cursor) } : {}) });
  const runs = listed.slice(0, limit);
  const last = runs[runs.length - 1];
  return listed.length > limit && last ? { runs, next: encodeCursor(last) } : { runs };
}

/** Opaque to callers: where the page before ended. */
export function encodeCursor(position: RunPosition): string {
  return Buffer.from(JSON.stringify([position.updatedAt, position.runId])).toString('base64url');
}

export function decodeCursor(cursor: string): RunPosition {
  try {
    const [updatedAt, runId] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
    if (Number.isSafeInteger(updatedAt) && typeof runId === 'string' && runId) return { updatedAt: updatedAt as number, runId };
  } catch { /* said below */ }
  throw new InvalidInputError(`invalid cursor ${JSON.stringify(cursor.slice(0, 80))}: pass back the next of the page before, as it was`);
}
