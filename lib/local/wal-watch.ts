import { statSync } from 'node:fs';
import type { Logger } from '../log.ts';
import { WAL_SIZE_LIMIT_BYTES } from './database.ts';

/**
 * Past this the -wal is not what the size limit leaves (16 MB, a step's large output for a moment): a
 * connection kept every WAL checkpoint from completing, and the -wal grows with each commit until it ends.
 */
export const WAL_WARN_BYTES = 4 * WAL_SIZE_LIMIT_BYTES;
/** A stat of one file: its cost is nothing next to a minute of steps. */
export const WAL_LOOK_EVERY_MS = 60_000;

export interface WalWatch {
  /** Looks now (the watch also looks every `everyMs`). */
  look(): void;
  stop(): void;
}

/**
 * Tells a worker's operator when the file's -wal keeps growing. Its cause is outside stepwise (a `sqlite3`
 * shell left inside BEGIN, a long read by another program, a process frozen in a read) and only a disk
 * filling up showed it: 200 MB in a minute under busy workers (README, "Retention"). Warned at the first
 * look past `warnBytes` and again at each doubling, so a reader held for hours is not a line a minute.
 */
export function watchWal(path: string, log: Logger, options: { warnBytes?: number; everyMs?: number } = {}): WalWatch {
  const warnBytes = options.warnBytes ?? WAL_WARN_BYTES;
  let warned = 0;
  const look = (): void => {
    let bytes: number;
    try {
      bytes = statSync(`${path}-wal`).size;
    } catch {
      return; // no -wal (yet, or a rollback-journal copy): nothing to say
    }
    if (bytes < warnBytes) {
      if (warned) log.info({ event: 'wal-shrunk', file: path, walBytes: bytes }, `the -wal beside ${path} is back to ${mb(bytes)}`);
      warned = 0;
      return;
    }
    if (warned && bytes < 2 * warned) return;
    warned = bytes;
    log.warn(
      { event: 'wal-large', file: path, walBytes: bytes },
      `the -wal beside ${path} has grown to ${mb(bytes)}: another connection keeps SQLite from copying it into the file (a sqlite3 shell inside BEGIN, a long read by another program, a frozen process). It grows with every step until that transaction ends; then the next complete WAL checkpoint cuts it back to ${mb(WAL_SIZE_LIMIT_BYTES)}`,
    );
  };
  const timer = setInterval(look, options.everyMs ?? WAL_LOOK_EVERY_MS);
  // The watch alone keeps no process alive.
  timer.unref();
  return { look, stop: () => clearInterval(timer) };
}

const mb = (bytes: number): string => `${Math.round(bytes / 2 ** 20)} MB`;
