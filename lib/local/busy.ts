/**
 * SQLite's refusal for a lock another connection holds, apart from the driver: the CLI's error line and
 * the HTTP app (which Lambda bundles without better-sqlite3) tell it by its code alone.
 */

/** How long a connection waits for another's write lock before SQLite refuses with SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 10_000;

/** Whether an error is SQLite refusing for a lock another connection holds (SQLITE_BUSY and its extended codes). */
export const isBusy = (error: unknown) => /^SQLITE_BUSY/.test(String((error as { code?: unknown } | undefined)?.code ?? ''));

/**
 * What a command or a request told "database is locked" is told besides: who may hold the lock, that a
 * write it did not finish changed nothing, and that it can be asked again. SQLite's words say none of it.
 * `database` names the file as the reader knows it.
 */
export function lockedDatabaseHint(database: string): string {
  return `another process held the write lock on ${database} for over ${BUSY_TIMEOUT_MS / 1000} s (a stepwise command or worker stopped with Ctrl-Z or kill -STOP, a sqlite3 shell inside a transaction); a write that did not finish changed nothing: try again once that process goes on or ends`;
}

/**
 * A local worker's step refused by the lock, for its step-error line (runWorker's `refusal`): the line said
 * only SQLite's "database is locked", where the CLI and `serve` say who may hold the lock. The step is
 * delivered again once its visibility timeout has passed; the holder letting go is what mends it.
 */
export function describeLockedStep(error: unknown): { refused: 'database-locked'; fix: string } | undefined {
  if (!isBusy(error)) return undefined;
  return {
    refused: 'database-locked',
    fix: `another process held the write lock on the database for over ${BUSY_TIMEOUT_MS / 1000} s (a stepwise command or worker stopped with Ctrl-Z or kill -STOP, a sqlite3 shell inside a transaction), so the step's checkpoint was not written: let that process go on or end`,
  };
}
