/**
 * SQLite's refusal for a write the disk has no room for, apart from the driver as busy.ts is: the CLI's
 * error line and the HTTP app (which Lambda bundles without better-sqlite3) tell it by its code alone.
 */
import { describeLockedStep } from './busy.ts';

/** Whether an error is SQLite refusing a write for want of space (SQLITE_FULL). */
export const isDiskFull = (error: unknown) => (error as { code?: unknown } | undefined)?.code === 'SQLITE_FULL';

/** What freeing space mends, said by a local worker's lines: nothing was written, and nothing is lost. */
const FREE_SPACE = 'the disk that holds the database is full, so nothing was written: free space on it, and each run goes on from its last checkpoint';

/**
 * A local worker's step refused by a full disk, for its step-error line (runWorker's `refusal`): the line
 * said only SQLite's "database or disk is full" and that the message would be delivered again.
 */
export function describeFullDiskStep(error: unknown): { refused: 'disk-full'; fix: string } | undefined {
  return isDiskFull(error) ? { refused: 'disk-full', fix: FREE_SPACE } : undefined;
}

/** What a local worker's step refused by the file says: the lock held past the busy timeout, or a full disk. */
export const describeLocalRefusal = (error: unknown) => describeLockedStep(error) ?? describeFullDiskStep(error);
