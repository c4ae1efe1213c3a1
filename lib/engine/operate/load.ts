import { decodeState, type StoredCheckpoint } from '../../core/codec.ts';
import { InvalidInputError, UnknownRunError, UnreadableCheckpointError } from '../../core/errors.ts';
import type { RunState } from '../../core/state.ts';
import type { CheckpointStore } from '../../ports.ts';

/** The latest checkpoint of a run, every step included, for an operation that must read all of it. */
export async function loadRun(store: CheckpointStore, runId: string, what: string): Promise<{ stored: StoredCheckpoint; state: RunState }> {
  const stored = await store.load(runId);
  if (!stored) throw new UnknownRunError(runId);
  try {
    return { stored, state: decodeState(stored) };
  } catch (error) {
    if (!(error instanceof UnreadableCheckpointError)) throw error;
    throw new InvalidInputError(`cannot ${what} run ${runId}: its latest checkpoint cannot be read (${stored.reason ?? error.message}); nothing changed`);
  }
}
