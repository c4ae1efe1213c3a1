import Database from 'better-sqlite3';
import { closeSync, openSync, truncateSync, writeSync } from 'node:fs';
import { openLocalRuntime } from '../../lib/local/runtime.ts';

/**
 * Writes a stepwise file at `path` and cuts it short after its first page, as a copy that stopped part
 * way leaves it: the schema names pages the file no longer has, which SQLite finds as the file opens.
 */
export function writeCutShortFile(path: string): void {
  openLocalRuntime({ dbPath: path }).close();
  truncateSync(path, 4096);
}

/**
 * Writes a stepwise file at `path` and overwrites the first page of its `table` with other bytes, as a
 * disk fault or a stray write leaves it: the file opens, and a query that reads the table finds it (the
 * runs table holds one run, which listing the runs reads).
 */
export function writeOverwrittenFile(path: string, table: string): void {
  // Closed, the last connection moves the WAL into the file, so the page overwritten is the one read.
  openLocalRuntime({ dbPath: path }).close();
  const db = new Database(path);
  // A run, so that listing the runs reads the table's page and not only its empty indexes.
  db.prepare("INSERT INTO runs (run_id, run_no, version, status, step, agent, created_at, updated_at) VALUES ('damaged', 1, 1, 'completed', 0, 'a', 0, 0)").run();
  db.close();
  overwriteTablePage(path, table);
}

/**
 * Overwrites the first page of `table` in the stepwise file at `path`, closed by every process (so the
 * WAL is in the file), with other bytes: the rest of the file reads as before.
 */
export function overwriteTablePage(path: string, table: string): void {
  const db = new Database(path);
  const { rootpage: page, size } = db.prepare("SELECT rootpage, (SELECT page_size FROM pragma_page_size) AS size FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) as { rootpage: number; size: number };
  db.close();
  const fd = openSync(path, 'r+');
  try {
    writeSync(fd, Buffer.alloc(size, 0xa5), 0, size, (page - 1) * size);
  } finally {
    closeSync(fd);
  }
}
