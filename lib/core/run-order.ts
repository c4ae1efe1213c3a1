/** Where a run stands in the list's order. */
export interface RunPosition {
  updatedAt: number;
  runId: string;
}

/**
 * The order every store lists runs in: the latest update first, then by run id, descending. Run ids are
 * ASCII (validateRunId), so JavaScript's string order is SQLite's BINARY collation and DynamoDB's.
 */
export function byListOrder(a: RunPosition, b: RunPosition): number {
  return b.updatedAt - a.updatedAt || (a.runId < b.runId ? 1 : a.runId > b.runId ? -1 : 0);
}

/** Whether `run` comes after `position` in that order: on a page that starts after it. */
export function isAfter(run: RunPosition, position: RunPosition): boolean {
  return run.updatedAt < position.updatedAt || (run.updatedAt === position.updatedAt && run.runId < position.runId);
}

/** The order due waits come in (a store's dueWaits): the soonest deadline first, then by run id, ascending. */
export function byDeadline(a: { deadline: number; runId: string }, b: { deadline: number; runId: string }): number {
  return a.deadline - b.deadline || (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0);
}
