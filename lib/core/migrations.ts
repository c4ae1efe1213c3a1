import { RECORD_FORMATS, type RecordKind } from './state.ts';

export type Migration = (record: Record<string, unknown>) => Record<string, unknown>;

/**
 * Migrations of each stored record kind from each old format to the next, applied on load so a run paused
 * under old code resumes under new code. `MIGRATIONS[kind][n]` migrates format n to n + 1; each is small,
 * pure and has its own test (test/core/formats.test.ts). A kind at format 1 has none yet.
 */
export const MIGRATIONS: Record<RecordKind, Record<number, Migration>> = {
  head: {
    // Format 2 added the optional wait record. A format-1 head has none and reads as is; the number moved so
    // that code older than waits refuses a waiting run instead of dropping its wait.
    1: (head) => head,
    // Format 3 added the optional budget and forkedFrom, and the status over-budget. A format-2 head has
    // none and reads as is; the number moved so that format-2 code, whose parsing dropped unknown fields,
    // refuses such a head instead of losing its budget or its origin on its next commit.
    2: (head) => head,
  },
  step: {},
  decision: {},
  wait: {
    // Format 2 added the optional inlineLimit, the agent's, for the answer's result. A format-1 wait has none
    // and its answer is shaped at the default as before; the number moved so that format-1 code, which
    // cannot read the field, refuses such a wait instead of failing on it as an unknown field.
    1: (wait) => wait,
  },
  ledger: {},
  summary: {
    // Format 2 added the optional cost of the block's records. A format-1 summary has none, and a run whose
    // dollar budget needs it reads the block's records (lib/engine/advance.ts); the number moved so that
    // format-1 code refuses such a summary instead of failing on it as an unknown field.
    1: (summary) => summary,
  },
};

/** The format a stored record says it has: `formatVersion`, or 1 for a record written before versions. */
export function formatOf(record: Record<string, unknown>): number {
  return record.formatVersion === undefined ? 1 : (record.formatVersion as number);
}

/**
 * A record of an older format brought to the current one through the chain, one version at a time, with
 * `formatVersion` set to the current format. The caller refuses newer formats first.
 */
export function migrateRecord(kind: RecordKind, record: Record<string, unknown>): Record<string, unknown> {
  let current = record;
  let version = formatOf(record);
  if (!Number.isInteger(version) || version < 0) throw new Error(`${kind} format ${JSON.stringify(record.formatVersion)} is not a format number`);
  while (version < RECORD_FORMATS[kind]) {
    const migrate = MIGRATIONS[kind][version];
    if (!migrate) throw new Error(`no migration from ${kind} format ${version}`);
    current = migrate(current);
    version += 1;
  }
  return { ...current, formatVersion: version };
}

/** The head's migrations (its format is the state format). */
export function migrateHead(head: Record<string, unknown>): Record<string, unknown> {
  return migrateRecord('head', head);
}
