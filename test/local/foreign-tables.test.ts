import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';

/** The file's tables, each with its columns, and the journal mode: what opening it may have changed. */
function layout(path: string): { tables: Record<string, string[]>; journal: unknown } {
  const db = new Database(path, { readonly: true });
  try {
    const names = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map((t) => t.name);
    const tables = Object.fromEntries(names.map((name) => [name, (db.prepare('SELECT name FROM pragma_table_info(?)').all(name) as { name: string }[]).map((c) => c.name)]));
    return { tables, journal: db.pragma('journal_mode', { simple: true }) };
  } finally {
    db.close();
  }
}

/**
 * `--db` naming another application's SQLite file. Where it has a table of one of stepwise's names, opening
 * it created stepwise's tables beside it and then failed with SQLite's "no such column: visible_at" (an
 * app's `queue`), or added columns to it and used it as the idempotency ledger (an app's `ledger`).
 */
describe('a database file of another application', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  const appFile = (sql: string) => {
    db = tempDb();
    const app = new Database(db.path);
    app.exec(sql);
    app.close();
    return layout(db.path);
  };

  it.each([
    ['ledger', 'CREATE TABLE ledger (key TEXT PRIMARY KEY, amount INTEGER); INSERT INTO ledger VALUES (\'rent\', 100)', 'no args_hash, status, lease_until'],
    ['queue', 'CREATE TABLE queue (id INTEGER PRIMARY KEY, job TEXT NOT NULL); INSERT INTO queue (job) VALUES (\'mail\')', 'no dedup_key, run_id, body, visible_at'],
  ])('with its own %s table is refused as bad input, naming the table, and left as it was', (table, sql, missing) => {
    const before = appFile(sql);
    let error: unknown;
    try {
      openLocalRuntime({ dbPath: db.path }).close();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toBe(`cannot open the database ${db.path}: its table ${table} is not stepwise's (${missing}): the file is another application's, which stepwise would change; pick another --db`);
    expect(layout(db.path)).toEqual(before);
    expect(before.journal).toBe('delete');
  });

  it('with only tables of other names is opened, its tables kept as they were', () => {
    const before = appFile("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER); INSERT INTO orders (total) VALUES (5)");
    openLocalRuntime({ dbPath: db.path }).close();
    const after = layout(db.path);
    expect(after.tables.orders).toEqual(before.tables.orders);
    expect(after.tables.runs).toContain('run_id');
  });
});
