import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * The demo's own database: a `source` table to copy into `target`. `target` deliberately has no unique
 * constraint on source_id, so a batch applied twice would show up as duplicate rows.
 *
 * `seedIfNew`: a file without the tables gets that many source rows as it gets them (the agent run alone,
 * `stepwise start --agent examples/migrate/agent.ts` as the README's AWS section has it, where it copied 0
 * rows unless the demo had filled the file). A file that has them is left as it is, emptied or not.
 */
export function openMigrationDb(path: string, options: { seedIfNew?: number } = {}): Database.Database {
  // The agent alone (`stepwise run --agent examples/migrate/agent.ts`) may run where .stepwise/ is not yet.
  mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('busy_timeout = 10000');
  // Under the write lock: two workers opening a new file at once seed it once.
  db.transaction(() => {
    const isNew = !db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'source'").get();
    db.exec(`
      CREATE TABLE IF NOT EXISTS source (id INTEGER PRIMARY KEY, name TEXT NOT NULL, amount INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS target (id INTEGER PRIMARY KEY AUTOINCREMENT, source_id INTEGER NOT NULL, name TEXT NOT NULL, amount INTEGER NOT NULL);
      -- Written in the same transaction as the rows it guards: the effect and its idempotency key commit together.
      CREATE TABLE IF NOT EXISTS applied_keys (key TEXT PRIMARY KEY, args TEXT NOT NULL, result TEXT NOT NULL);
      -- Where drop_source puts the source rows, so the demo can still check the copy after the risky step.
      CREATE TABLE IF NOT EXISTS source_archive (id INTEGER PRIMARY KEY, name TEXT NOT NULL, amount INTEGER NOT NULL);
      CREATE VIEW IF NOT EXISTS all_source AS SELECT id, name, amount FROM source UNION ALL SELECT id, name, amount FROM source_archive;
    `);
    if (isNew && options.seedIfNew) insertSource(db, options.seedIfNew);
  }).immediate();
  return db;
}

/** Rows 1..rows of the demo's source table, made the same way every time. */
function insertSource(db: Database.Database, rows: number): void {
  const insert = db.prepare('INSERT INTO source (id, name, amount) VALUES (?, ?, ?)');
  for (let id = 1; id <= rows; id++) insert.run(id, `customer-${id}`, (id * 7919) % 10_000);
}

export function seedSource(path: string, rows: number): void {
  const db = openMigrationDb(path);
  db.transaction(() => insertSource(db, rows))();
  db.close();
}

export interface MigrationCheck {
  sourceRows: number;
  targetRows: number;
  distinctCopied: number;
  duplicates: number;
  missing: number;
  mismatched: number;
  exactlyOnce: boolean;
}

export function checkMigration(db: Database.Database): MigrationCheck {
  const one = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
  const sourceRows = one('SELECT count(*) AS n FROM all_source');
  const targetRows = one('SELECT count(*) AS n FROM target');
  const distinctCopied = one('SELECT count(DISTINCT source_id) AS n FROM target');
  const missing = one('SELECT count(*) AS n FROM all_source s WHERE NOT EXISTS (SELECT 1 FROM target t WHERE t.source_id = s.id)');
  const mismatched = one('SELECT count(*) AS n FROM target t JOIN all_source s ON s.id = t.source_id WHERE s.name <> t.name OR s.amount <> t.amount');
  const duplicates = targetRows - distinctCopied;
  return { sourceRows, targetRows, distinctCopied, duplicates, missing, mismatched, exactlyOnce: duplicates === 0 && missing === 0 && mismatched === 0 && targetRows === sourceRows };
}
