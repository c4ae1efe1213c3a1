import { canonicalJson } from './canonical-json.ts';
import { NewerFormatError, UnreadableCheckpointError } from './errors.ts';
import { migrateHead } from './migrations.ts';
import {
  FORMAT_VERSION, decisionSchema, headOf, runHeadSchema, stepRecordSchema,
  type Decision, type RunState, type RunStatus, type StepRecord,
} from './state.ts';

/**
 * A checkpoint as a store holds it: serialized text, decoded here so every backend reads and writes
 * exactly the same bytes and format handling (migration, refusal of newer formats) lives in one place.
 */
export interface StoredCheckpoint {
  runId: string;
  version: number;
  /** The status column, readable even when the head is not. */
  status: RunStatus;
  head: string;
  /** Step records in step order, starting after `stepsAfter` (0 unless the load asked to skip some). */
  steps: string[];
  stepsAfter?: number;
  /** The recorded decision for the next step, if any. */
  pending?: string;
  workerId: string;
  updatedAt: number;
  /** Why the run ended, from the status column: readable even when the head is not. */
  reason?: string;
  /** Redeliveries that started the next step at this version (CheckpointStore.addRestarts); 0 if absent. */
  restarts?: number;
  /** A cancel asked for and not yet applied (CheckpointStore.requestCancel): who, when, why. */
  cancelRequested?: string;
}

export const encodeHead = (state: RunState): string => canonicalJson(headOf(state));
export const encodeStep = (record: StepRecord): string => canonicalJson(record);
export const encodeDecision = (decision: Decision): string => canonicalJson(decision);

/**
 * Decodes a stored checkpoint. `known` are step records the caller already holds (decoded earlier: they
 * never change once written); `stored.steps` must continue them.
 */
export function decodeState(stored: StoredCheckpoint, known: readonly StepRecord[] = []): RunState {
  const { runId, version } = stored;
  const raw = parseJson(stored.head, runId, version, 'head');
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new UnreadableCheckpointError(runId, version, 'head is not an object');
  }
  const format = (raw as Record<string, unknown>).formatVersion;
  if (typeof format === 'number' && format > FORMAT_VERSION) throw new NewerFormatError(runId, format, FORMAT_VERSION);
  let migrated: Record<string, unknown>;
  try {
    migrated = migrateHead(raw as Record<string, unknown>);
  } catch (error) {
    throw new UnreadableCheckpointError(runId, version, (error as Error).message);
  }
  const head = runHeadSchema.safeParse(migrated);
  if (!head.success) throw new UnreadableCheckpointError(runId, version, `head: ${head.error.issues[0]?.message ?? 'invalid'}`);
  const after = stored.stepsAfter ?? 0;
  if (after !== known.length) throw new Error(`decodeState: ${known.length} known steps, but the load skipped ${after}`);
  const steps = [...known, ...stored.steps.map((text, i) => {
    const parsed = stepRecordSchema.safeParse(parseJson(text, runId, version, `step ${after + i + 1}`));
    if (!parsed.success) throw new UnreadableCheckpointError(runId, version, `step ${after + i + 1}: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  })];
  if (steps.length !== head.data.step || steps.some((s, i) => s.step !== i + 1)) {
    throw new UnreadableCheckpointError(runId, version, `head says ${head.data.step} steps, found ${steps.length}`);
  }
  const state: RunState = { ...head.data, steps };
  if (stored.pending) {
    const pending = decisionSchema.safeParse(parseJson(stored.pending, runId, version, 'decision'));
    if (!pending.success) throw new UnreadableCheckpointError(runId, version, 'recorded decision is invalid');
    if (pending.data.step === state.step + 1) state.pending = pending.data;
  }
  return state;
}

function parseJson(text: string, runId: string, version: number, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new UnreadableCheckpointError(runId, version, `${what} is not valid JSON`);
  }
}
