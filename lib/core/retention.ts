import { DEFAULT_RETENTION_DAYS, RETENTION_DAYS_ENV } from '../settings.ts';
import { InvalidInputError } from './errors.ts';

const DAY_MS = 24 * 3600 * 1000;

/**
 * How long every checkpoint version stays inspectable. After it, older versions go (DynamoDB TTL on AWS,
 * `stepwise prune` and worker starts locally); a run's latest checkpoint, its step records and its
 * recorded decision never do, however long it waits.
 */
export const DEFAULT_RETENTION_MS = DEFAULT_RETENTION_DAYS * DAY_MS;

/**
 * A blob no checkpoint refers to is collected only once it is this old: a step writes its blob before the
 * checkpoint that refers to it (crash point C5), so a younger one may belong to a step still under way.
 */
export const BLOB_GRACE_MS = DAY_MS;

/** STEPWISE_RETENTION_DAYS as milliseconds, or undefined for the default; a clear error if it is not a positive number. */
export function retentionMsFromEnv(env: NodeJS.ProcessEnv): number | undefined {
  const days = env[RETENTION_DAYS_ENV];
  if (days === undefined || days === '') return undefined;
  return daysToMs(RETENTION_DAYS_ENV, days);
}

/**
 * The most days a window may be: its milliseconds a number JavaScript holds exactly (about 285,000 years).
 * Past it, DynamoDB's document client refused every checkpoint's TTL ("greater than
 * Number.MAX_SAFE_INTEGER"), so `STEPWISE_RETENTION_DAYS=999999999999` for "keep forever" failed every
 * start and step on AWS.
 */
export const MAX_RETENTION_DAYS = Math.floor(Number.MAX_SAFE_INTEGER / DAY_MS);

/** A number of days (a command-line flag, an environment variable) as milliseconds. */
export function daysToMs(name: string, days: string): number {
  const n = Number(days);
  if (!(n >= 0) || !Number.isFinite(n) || days.trim() === '') throw new InvalidInputError(`${name} must be a number of days (0 or more), got ${JSON.stringify(days)}`);
  if (n > MAX_RETENTION_DAYS) throw new InvalidInputError(`${name} must be at most ${MAX_RETENTION_DAYS} days, got ${JSON.stringify(days)}`);
  return n * DAY_MS;
}
