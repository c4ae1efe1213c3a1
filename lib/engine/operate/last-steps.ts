import { decodeRecords, type StoredCheckpoint } from '../../core/codec.ts';
import { CONDENSE_BLOCK } from '../../core/condense.ts';
import { InvalidInputError, UnknownRunError, UnreadableCheckpointError } from '../../core/errors.ts';
import { checkCompletedStep, stateAtStep } from '../../core/operate.ts';
import type { RunState, StepRecord } from '../../core/state.ts';
import type { CheckpointStore } from '../../ports.ts';
import { summaryCost } from '../../llm/cost.ts';
import { loadAsResumed } from './load.ts';

/**
 * How many steps `status` and `show` print of a longer run, its last, with a line that says how many came
 * before and how to see them: a run of 50,000 steps printed (and read) every one.
 */
export const STEPS_SHOWN = 50;

export interface LastSteps {
  stored: StoredCheckpoint;
  /** The run now, read as a resume reads it (its block summaries and the records after them). */
  state: RunState;
  /**
   * The run as it stood after step `atStep` (the latest by default): its usage and cost those of every step
   * through it, its records those from step stepsFrom + 1, the steps shown and at most a block before them.
   */
  at: RunState;
  /** The last `last` steps through atStep, steps `left` + 1 on. */
  steps: StepRecord[];
  /** The steps before them, neither read nor shown. */
  left: number;
}

/**
 * A run and the last `last` steps through `atStep` (all of them when `last` is undefined), read as a resume
 * reads the run, and the records of the steps it does not hold, from the last block summary before them:
 * `show --step 40` of a run of 50,000 steps reads about 40 records, not 50,000. `what` names the operation
 * in the refusal of a run whose records cannot be read; `read`, the bounded read, when the caller made it.
 */
export async function readLastSteps(
  store: CheckpointStore, runId: string, what: string, options: { atStep?: number; last?: number; read?: StoredCheckpoint } = {},
): Promise<LastSteps> {
  const bounded = options.read ?? (await store.load(runId, { recent: true }));
  if (!bounded) throw new UnknownRunError(runId);
  let records = false;
  try {
    const { stored, state } = (await loadAsResumed(store, runId, () => false, bounded))!;
    const n = options.atStep ?? state.step;
    checkCompletedStep(state, n);
    const from = state.stepsFrom ?? 0;
    const left = options.last === undefined ? 0 : Math.max(0, n - options.last);
    // The steps before the window count from their blocks' summaries, the first block without its cost
    // (a summary of older code, or one that found no price this code has) and those after it from their
    // records, so every step is priced by its model.
    const before = (state.condensed ?? []).filter((b) => b.last <= Math.min(n, from));
    const uncosted = before.findIndex((b) => !summaryCost(b));
    const low = Math.min(Math.floor(left / CONDENSE_BLOCK), uncosted < 0 ? before.length : uncosted) * CONDENSE_BLOCK;
    const through = Math.min(n, from);
    const texts = low < through ? await store.records(runId, { after: low, through }) : [];
    records = true;
    const read = decodeRecords(runId, stored.version, texts, low, through);
    const { stepsFrom: _from, ...rest } = state;
    const held: RunState = { ...rest, steps: [...read, ...(n >= from ? state.steps : [])], ...(low ? { stepsFrom: low } : {}) };
    const at = n === state.step ? held : stateAtStep(held, n);
    return { stored, state, at, steps: at.steps.slice(left - low), left };
  } catch (error) {
    if (!(error instanceof UnreadableCheckpointError)) throw error;
    // As loadRun: the cause kept, so the API answers a checkpoint it cannot read as its own failure (500).
    const unreadable = records ? `its step records cannot be read (${error.message})` : `its latest checkpoint cannot be read (${bounded.reason ?? error.message})`;
    throw new InvalidInputError(`cannot ${what} run ${runId}: ${unreadable}; nothing changed`, { cause: error });
  }
}
