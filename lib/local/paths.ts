import { realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

/** The SQLite file of the embedded runtime, relative to the working directory (STEPWISE_DB or --db move it). */
export const DEFAULT_DB_PATH = '.stepwise/stepwise.db';

/**
 * Where the files that go with a database are kept (signing.key, outbox/, api-token): beside the file
 * itself, its symlinks followed, as SQLite keeps its -wal and -shm. Beside the path as given, a worker
 * started with --db naming a symlink to the file signed its approval links with a key beside the link,
 * and `serve` given the file's own path checked them with another key beside the file: every link was
 * "Invalid link". A path to no file yet is taken as given (it is the file about to be made).
 */
export function databaseDir(dbPath: string): string {
  try {
    return dirname(realpathSync(dbPath));
  } catch {
    return dirname(dbPath);
  }
}

/**
 * `~` or `~/...` as the home directory. No shell expands it inside quotes, after `--db=`, or in an env
 * file (docker --env-file, systemd's EnvironmentFile, .env): STEPWISE_DB=~/runs.db made a directory named
 * `~` in the working directory and a new, empty database in it, and each working directory got its own.
 * `~user/...` is left as written.
 */
export function expandHome(path: string): string {
  if (path === '~') return homedir();
  return path.startsWith('~/') ? join(homedir(), path.slice(2)) : path;
}
