/**
 * The stored format of each record kind. Bump a kind's number when its stored shape changes (a field added,
 * renamed or given a new meaning), and add the migration from the old number in migrations.ts. A record
 * carries its format as `formatVersion`; a record without one is format 1, so a kind still at 1 is
 * written exactly as before versions existed. The head's is its state format (format 2 added the wait).
 * Code refuses a record of a newer format than it reads, and a record with a field it does not know,
 * rather than dropping what it cannot understand. Apart from the schemas, so stores that only stamp a
 * format load no zod.
 */
export const RECORD_FORMATS = { head: 3, step: 1, decision: 1, wait: 2, ledger: 1, summary: 2 } as const;
export type RecordKind = keyof typeof RECORD_FORMATS;
