import { decodeState, type StoredCheckpoint } from '../../core/codec.ts';
import { InvalidInputError, UnknownRunError, UnreadableCheckpointError } from '../../core/errors.ts';
import type { RunState } from '../../core/state.ts';
import type { CheckpointStore } from '../../ports.ts';

/**
 * The agent a run records, or undefined when there is no such run or its checkpoint cannot be read: for a
 * check made before an operation, which then says why itself.
 */
export async function recordedAgentOf(store: CheckpointStore, runId: string): Promise<string | undefined> {
  const stored = await store.load(runId);
  try {
    return stored ? decodeState(stored).agent : undefined;
  } catch {
    return undefined;
  }
}

/** The latest checkpoint of a run, every step included, for an operation that must read all of it. */
export async function loadRun(store: CheckpointStore, runId: string, what: string): Promise<{ stored: StoredCheckpoint; state: RunState }> {
  const stored = await store.load(runId);
  if (!stored) throw new UnknownRunError(runId);
  try {
    return { stored, state: decodeState(stored) };
  } catch (error) {
    if (!(error instanceof UnreadableCheckpointError)) throw error;
    // The cause kept: the API answers a checkpoint it cannot read as its own failure (500), not the caller's.
    throw new InvalidInputError(`cannot ${what} run ${runId}: its latest checkpoint cannot be read (${stored.reason ?? error.message}); nothing changed`, { cause: error });
  }
}

/**
 * A run's latest checkpoint read as a worker's resume reads it (lib/engine/advance.ts): its block summaries
 * and the records after them, not every record, which for a run of 20,000 steps took most of a second.
 * Read whole where `whole` says the bounded state will not do, and where the bounded read cannot be
 * decoded: judged on every record, as the engine judges it. `read`: the bounded read, when the caller has
 * made it. Undefined for no such run; a checkpoint this code cannot read throws as decodeState does.
 */
export async function loadAsResumed(
  store: CheckpointStore, runId: string, whole: (state: RunState) => boolean, read?: StoredCheckpoint,
): Promise<{ stored: StoredCheckpoint; state: RunState } | undefined> {
  const bounded = read ?? (await store.load(runId, { recent: true }));
  if (!bounded) return undefined;
  try {
    const state = decodeState(bounded);
    if (!state.stepsFrom || !whole(state)) return { stored: bounded, state };
  } catch (error) {
    if (!(error instanceof UnreadableCheckpointError) || bounded.stepsAfter === undefined) throw error;
  }
  const stored = (await store.load(runId)) ?? bounded;
  return { stored, state: decodeState(stored) };
}
