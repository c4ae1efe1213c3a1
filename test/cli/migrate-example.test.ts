import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openMigrationDb } from '../../examples/migrate/migration-db.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'examples/migrate/agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const migrateDb = db.path.replace(/stepwise\.db$/, 'migrate.db');
const env = { STEPWISE_DB: db.path, MIGRATE_DB: migrateDb, ANTHROPIC_API_KEY: '', STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined };
const count = (path: string, table: string) => {
  const d = new Database(path, { readonly: true });
  try {
    return (d.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
  } finally {
    d.close();
  }
};

describe('the demo agent run alone, as the README has it (without npm run demo)', () => {
  it('fills a new file with the demo rows and copies them, where it copied 0', { timeout: 120_000 }, async () => {
    const run = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'copy the rows', '--run-id', 'alone'], env);
    // It stops at the approval before the drop: every row copied by then, once.
    expect(run.code, run.err).toBe(0);
    expect(run.out).toContain('waiting for approval');
    expect(count(migrateDb, 'source')).toBe(1000);
    expect(count(migrateDb, 'target')).toBe(1000);
  });

  it('seeds a file once: a file that has the tables, emptied or not, is left as it is', () => {
    const path = db.path.replace(/stepwise\.db$/, 'seeded.db');
    openMigrationDb(path, { seedIfNew: 5 }).close();
    openMigrationDb(path, { seedIfNew: 5 }).close();
    expect(count(path, 'source')).toBe(5);
    const d = openMigrationDb(path);
    d.exec('DELETE FROM source');
    d.close();
    openMigrationDb(path, { seedIfNew: 5 }).close();
    expect(count(path, 'source')).toBe(0);
  });
});
