import { InvalidInputError } from '../../core/errors.ts';
import type { CheckpointInfo, CheckpointStore } from '../../ports.ts';

/**
 * A page of a run's timeline, newest page first and oldest first within it: the API and the inspector
 * show a run of thousands of steps a page at a time. `next` is there while older checkpoints remain; it
 * is the cursor of the page before this one in time, the version the next page ends below.
 */
export async function historyPage(
  store: CheckpointStore, runId: string, query: { limit: number; cursor?: string },
): Promise<{ checkpoints: CheckpointInfo[]; next?: string }> {
  const before = query.cursor !== undefined ? decodeHistoryCursor(query.cursor) : undefined;
  // One more than the page: whether older checkpoints remain, without another read.
  const read = await store.history(runId, { limit: query.limit + 1, ...(before !== undefined ? { before } : {}) });
  if (read.length <= query.limit) return { checkpoints: read };
  const checkpoints = read.slice(1);
  return { checkpoints, next: String(checkpoints[0]!.version) };
}

function decodeHistoryCursor(cursor: string): number {
  // Digits only: Number() would also read '0x2', '1e1' and ' 2'.
  if (/^\d{1,10}$/.test(cursor) && Number(cursor) >= 1) return Number(cursor);
  throw new InvalidInputError(`invalid cursor ${JSON.stringify(cursor.slice(0, 80))}: pass back the next of the page before, as it was`);
}
