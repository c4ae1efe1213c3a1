/**
 * Reading a SQLite WAL file as its documented format lays it out (https://sqlite.org/fileformat2.html,
 * "The WAL file"): its header, and its frames, each a page of the database. For the benches, and for the
 * tests that count the pages a step writes.
 */
import type Database from 'better-sqlite3';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';

/**
 * How many times the WAL of the SQLite file at `dbPath` has started again from its beginning since it
 * was created: the checkpoint sequence number of its header (0 for a WAL that has only grown, or none).
 * Until it has, every commit appends to the file, and its fsync must write the file's new size too
 * (on ext4 a journal commit: about twice the fsync of a commit that overwrites WAL pages, as every commit
 * does once a checkpoint has let the WAL start again). A long-lived database is in the second state.
 */
export function walRestarts(dbPath: string): number {
  let fd: number;
  try { fd = openSync(`${dbPath}-wal`, 'r'); } catch { return 0; }
  try {
    const header = Buffer.alloc(16);
    if (readSync(fd, header, 0, 16, 0) < 16) return 0;
    const magic = header.readUInt32BE(0);
    return magic === 0x377f0682 || magic === 0x377f0683 ? header.readUInt32BE(12) : 0;
  } finally {
    closeSync(fd);
  }
}

/** Frames in a WAL file, by the page each one holds. */
function framesByPage(walPath: string): Map<number, number> {
  const wal = readFileSync(walPath);
  const pageSize = wal.readUInt32BE(8);
  const frames = new Map<number, number>();
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    const page = wal.readUInt32BE(at);
    frames.set(page, (frames.get(page) ?? 0) + 1);
  }
  return frames;
}

/**
 * Frames per step by b-tree name: the pages in the WAL of the file at `dbPath` (opened as `db`), named
 * from the database's own dbstat; `steps`: the transactions they are divided among.
 */
export function framesByTree(db: Database.Database, dbPath: string, steps: number): Map<string, number> {
  const names = new Map((db.prepare('SELECT pageno, name FROM dbstat').all() as { pageno: number; name: string }[]).map((r) => [r.pageno, r.name]));
  const trees = new Map<string, number>();
  for (const [page, count] of framesByPage(`${dbPath}-wal`)) {
    // Page 1 holds the file's header, rewritten whenever the file grows by a page.
    const name = page === 1 ? 'file header (page 1)' : names.get(page) ?? 'free pages';
    trees.set(name, (trees.get(name) ?? 0) + count / steps);
  }
  return trees;
}

/** Starts with an empty WAL that no checkpoint will empty again: what `write` adds is all there. */
export function emptiedWal(db: Database.Database): void {
  db.pragma('wal_autocheckpoint = 0');
  db.pragma('wal_checkpoint(TRUNCATE)');
}
