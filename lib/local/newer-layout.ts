/**
 * A SQLite file of a newer layout than this code's, apart from the driver as busy.ts is: the CLI's worker
 * and the local engine tell it without loading better-sqlite3.
 */
import { InvalidInputError } from '../core/errors.ts';
import { isDamaged } from './damaged.ts';

/**
 * A file of a newer layout than this code's: a user error (exit code 2), and one that stops a worker (no
 * retry of its step mends it), as a damaged file does.
 */
export class NewerLayoutError extends InvalidInputError {}

/** Whether a worker on a SQLite file stops for this error rather than try its step again: the file is damaged, or of a newer layout. */
export const stopsLocalWorker = (error: unknown): boolean => isDamaged(error) || error instanceof NewerLayoutError;
