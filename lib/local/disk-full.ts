/**
 * SQLite's refusal for a write the disk has no room for, apart from the driver as busy.ts is: the CLI's
 * error line and the HTTP app (which Lambda bundles without better-sqlite3) tell it by its code alone.
 */

/** Whether an error is SQLite refusing a write for want of space (SQLITE_FULL). */
export const isDiskFull = (error: unknown) => (error as { code?: unknown } | undefined)?.code === 'SQLITE_FULL';
