import type { z } from 'zod';
import { canonicalJson, canonicalValue } from './canonical-json.ts';
import { NewerFormatError, UnknownFieldError, UnreadableCheckpointError } from './errors.ts';
import { formatOf, migrateRecord } from './migrations.ts';
import { withFields } from './objects.ts';
import { CONDENSE_BLOCK, condensedBlocks } from './condense.ts';
import {
  RECORD_FORMATS, condensedBlockSchema, decisionSchema, headOf, runHeadSchema, stepRecordSchema,
  type CondensedBlock, type Decision, type RecordKind, type RunHead, type RunState, type RunStatus, type StepRecord,
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
  /**
   * From a bounded load (`recent`): the stored summaries of the run's first condensed blocks, in order;
   * `steps` then starts after the last of them (or after `afterStep`, if later).
   */
  summaries?: string[];
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

export const encodeHead = (state: RunState): string => {
  const head = headOf(state);
  return canonicalJson(head.wait ? { ...head, wait: withFormat('wait', head.wait) } : head);
};
export const encodeStep = (record: StepRecord): string => canonicalJson(withFormat('step', record));
export const encodeDecision = (decision: Decision): string => canonicalJson(withFormat('decision', decision));
export const encodeSummary = (block: CondensedBlock): string => canonicalJson(withFormat('summary', block));

/** The steps a decoding caller already holds (a worker's step cache): records from step `from` + 1, and the summaries before. */
export interface HeldSteps {
  from: number;
  steps: readonly StepRecord[];
  condensed: readonly CondensedBlock[];
  /** The head this process wrote last, as text and decoded (heldHead): a load returning that text is not decoded again. */
  head?: { text: string; value: RunHead };
  /**
   * When the run these are records of was created: a run deleted and started again under its id is another
   * run (created later: the first had to end and be deleted), and a process that held the first's records
   * must not take them for the second's.
   */
  createdAt?: number;
}

/**
 * A head this code has just encoded and written, held for the writer's next load: the state's own head as
 * decoding its text would give it (no undefined field, a wait without its format, keys in the text's order),
 * so it is neither parsed nor checked (the next process to load it does both). Keys in order, the states
 * made from it keep them so (transitions copy them in place), and encoding the next head sorts nothing.
 * Nothing is copied that need not be: states are never changed in place (lib/core/transitions.ts makes
 * new ones), so the held head can share their parts.
 */
export function heldHead(text: string, state: RunState): { text: string; value: RunHead } {
  return { text, value: canonicalValue(headOf(state)) as RunHead };
}

/** A record as stored: with its kind's format, which format 1 leaves out (so its bytes are as they always were). */
function withFormat<T extends object>(kind: Exclude<RecordKind, 'head'>, record: T): T {
  return RECORD_FORMATS[kind] > 1 ? { ...record, formatVersion: RECORD_FORMATS[kind] } : record;
}

/**
 * Decodes a stored checkpoint. `known` are step records the caller already holds (decoded earlier: they
 * never change once written); `stored.steps` must continue them. Every record is checked for its format
 * (a newer one is NewerFormatError), migrated, and parsed strictly (an unknown field is UnknownFieldError);
 * anything else that does not parse is UnreadableCheckpointError.
 */
export function decodeState(stored: StoredCheckpoint, known: readonly StepRecord[] | HeldSteps = []): RunState {
  const { runId, version } = stored;
  const read = <T>(kind: RecordKind, text: string, where: string, schema: z.ZodType<T>): T =>
    readRecord(kind, parseJson(text, runId, version, where), where, schema, runId, version);
  const held: HeldSteps = Array.isArray(known) ? { from: 0, steps: known, condensed: [] } : known as HeldSteps;
  // The head this process wrote (a worker's next step): the very text, so the very value.
  const head = held.head?.text === stored.head ? held.head.value : read('head', stored.head, 'head', runHeadSchema);
  // Thrown as unreadable, the one error on which a worker drops what it holds and reads the run whole.
  if (held.createdAt !== undefined && held.createdAt !== head.createdAt) {
    throw new UnreadableCheckpointError(runId, version, 'the step records held are of an earlier run of this id (deleted since), not of this one');
  }
  const after = stored.stepsAfter ?? 0;
  // Holding nothing, the state starts where the load did; holding records, the load must continue them.
  const from = held.steps.length || held.from ? held.from : after;
  if (after !== from + held.steps.length) throw new Error(`decodeState: ${from + held.steps.length} known steps, but the load skipped ${after}`);
  // Held records with none after them (a worker's next step) are the state's as they are: records and the
  // arrays of them are never changed in place.
  const steps = stored.steps.length
    ? [...held.steps, ...stored.steps.map((text, i) => read('step', text, `step ${after + i + 1}`, stepRecordSchema))]
    : held.steps as StepRecord[];
  if (from + steps.length !== head.step || steps.some((s, i) => s.step !== from + i + 1)) {
    throw new UnreadableCheckpointError(runId, version, `head says ${head.step} steps, found ${from + steps.length}`);
  }
  const condensed = stored.summaries
    ? stored.summaries.map((text, i) => read('summary', text, `summary ${i + 1}`, condensedBlockSchema))
    : [...held.condensed];
  checkCondensed(condensed, from, head.step, runId, version);
  const state: RunState = withFields(head, { steps });
  if (from) state.stepsFrom = from;
  if (condensed.length) state.condensed = condensed;
  if (stored.pending) {
    const pending = read('decision', stored.pending, 'decision', decisionSchema);
    if (pending.step === state.step + 1) state.pending = pending;
  }
  return state;
}

/**
 * Stored summaries are the run's first blocks of CONDENSE_BLOCK steps, one each, no more than the run has
 * condensed, and they cover every step the state does not hold (the block size is part of the stored format).
 */
function checkCondensed(condensed: readonly CondensedBlock[], from: number, step: number, runId: string, version: number): void {
  if (condensed.some((b, i) => b.last !== (i + 1) * CONDENSE_BLOCK)
    || condensed.length > condensedBlocks(step) || from > condensed.length * CONDENSE_BLOCK) {
    throw new UnreadableCheckpointError(runId, version, `${condensed.length} summaries do not fit ${step} steps from step ${from + 1}`);
  }
}

/** One stored record: its format checked, migrated to the current one, parsed strictly. */
function readRecord<T>(kind: RecordKind, raw: unknown, where: string, schema: z.ZodType<T>, runId: string, version: number): T {
  const format = formatOf(objectOf(raw, where, runId, version));
  let record = upgrade(kind, raw, where, runId, version);
  // The wait record inside the head has a format of its own; the head's schema then checks it.
  if (kind === 'head' && record.wait !== undefined) record = { ...record, wait: upgrade('wait', record.wait, 'wait', runId, version) };
  const parsed = schema.safeParse(record);
  if (parsed.success) return parsed.data;
  const unknown = parsed.error.issues.flatMap((issue) => (issue.code === 'unrecognized_keys' ? issue.keys.map((key) => [...issue.path, key].join('.')) : []));
  if (unknown.length) throw new UnknownFieldError(runId, where, kind, format, unknown);
  const issue = parsed.error.issues[0];
  throw new UnreadableCheckpointError(runId, version, `${where}: ${issue?.path.length ? `${issue.path.join('.')}: ` : ''}${issue?.message ?? 'invalid'}`);
}

/**
 * A record brought to its kind's current format: refused if newer, migrated if older. Records other than
 * the head are held without `formatVersion` (encoding adds it back).
 */
function upgrade(kind: RecordKind, raw: unknown, where: string, runId: string, version: number): Record<string, unknown> {
  const record = objectOf(raw, where, runId, version);
  const format = formatOf(record);
  if (typeof format !== 'number' || !Number.isInteger(format)) {
    throw new UnreadableCheckpointError(runId, version, `${where}: format ${JSON.stringify(record.formatVersion)} is not a format number`);
  }
  if (format > RECORD_FORMATS[kind]) throw new NewerFormatError(runId, where, kind, format, RECORD_FORMATS[kind]);
  // The common case, read at every step: a record of the current format, held as stored (no copies).
  if (format === RECORD_FORMATS[kind] && (kind === 'head' || record.formatVersion === undefined)) return record;
  let migrated: Record<string, unknown>;
  try {
    migrated = migrateRecord(kind, record);
  } catch (error) {
    throw new UnreadableCheckpointError(runId, version, `${where}: ${(error as Error).message}`);
  }
  if (kind === 'head') return migrated;
  const { formatVersion: _format, ...rest } = migrated;
  return rest;
}

function objectOf(raw: unknown, where: string, runId: string, version: number): Record<string, unknown> {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new UnreadableCheckpointError(runId, version, `${where} is not an object`);
  return raw as Record<string, unknown>;
}

/**
 * What a store returns in place of a record it cannot give (a spilled value whose blob is gone or damaged):
 * decoding then names the record and why, where "not valid JSON" hid the cause. JSON text never starts
 * with this.
 */
const UNREADABLE_MARK = '\u0000unreadable: ';

export function unreadableText(why: string): string {
  return UNREADABLE_MARK + why;
}

function parseJson(text: string, runId: string, version: number, what: string): unknown {
  if (text.startsWith(UNREADABLE_MARK)) throw new UnreadableCheckpointError(runId, version, `${what}: ${text.slice(UNREADABLE_MARK.length)}`);
  try {
    return JSON.parse(text);
  } catch {
    throw new UnreadableCheckpointError(runId, version, `${what} is not valid JSON`);
  }
}

/**
 * What a worker needs to read this stored checkpoint, when this code cannot (a record of a newer format,
 * or with fields it does not know): the head, the step records the load returned and the pending decision
 * are checked, nothing is decoded into a state. Undefined when this code reads all of them, and for a
 * checkpoint no code can read (that is a failed run's reason, not a format to deploy).
 */
/** The head alone, checked as decodeState checks it: for a caller that needs no step record (a list of runs). */
export function decodeHead(stored: StoredCheckpoint): RunHead {
  return readRecord('head', parseJson(stored.head, stored.runId, stored.version, 'head'), 'head', runHeadSchema, stored.runId, stored.version);
}

/**
 * Step records read alone (CheckpointStore.records), steps `after` + 1 to `through`, of the run whose latest
 * version is `version`: each checked and migrated as decodeState reads it, in order, none missing.
 */
export function decodeRecords(runId: string, version: number, texts: readonly string[], after: number, through: number): StepRecord[] {
  if (texts.length !== Math.max(0, through - after)) throw new UnreadableCheckpointError(runId, version, `steps ${after + 1}-${through}: ${texts.length} records found`);
  const records = texts.map((text, i) => {
    const where = `step ${after + i + 1}`;
    return readRecord('step', parseJson(text, runId, version, where), where, stepRecordSchema, runId, version);
  });
  const out = records.findIndex((r, i) => r.step !== after + i + 1);
  if (out >= 0) throw new UnreadableCheckpointError(runId, version, `step ${after + out + 1}: its record says step ${records[out]!.step}`);
  return records;
}

export function formatNeeds(stored: StoredCheckpoint): string | undefined {
  const { runId, version } = stored;
  try {
    readRecord('head', parseJson(stored.head, runId, version, 'head'), 'head', runHeadSchema, runId, version);
    const after = stored.stepsAfter ?? 0;
    stored.steps.forEach((text, i) => {
      const where = `step ${after + i + 1}`;
      readRecord('step', parseJson(text, runId, version, where), where, stepRecordSchema, runId, version);
    });
    if (stored.pending) readRecord('decision', parseJson(stored.pending, runId, version, 'decision'), 'decision', decisionSchema, runId, version);
    return undefined;
  } catch (error) {
    if (error instanceof NewerFormatError) return error.needs;
    return undefined;
  }
}
