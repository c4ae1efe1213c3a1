import type Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { canonicalJson } from '../../lib/core/canonical-json.ts';
// What an agent of one's own imports from 'stepwise'.
import { IdempotencyKeyReuseError } from '../../lib/index.ts';
import { checkMigration, openMigrationDb } from './migration-db.ts';
import { ScriptedMigrationModel } from './scripted-model.ts';

/**
 * The demo agent: migrate rows from `source` to `target` in batches. copy_batch is the side effect; it
 * stores its idempotency key in the target database in the same transaction as the rows, so a step redone
 * after a crash finds its key and copies nothing twice, even if the crash came after the commit.
 */
let db: Database.Database | undefined;
function migrationDb(): Database.Database {
  // A new file gets the demo's 1,000 source rows, so the agent run alone has something to copy.
  return (db ??= openMigrationDb(process.env.MIGRATE_DB ?? '.stepwise/migrate-demo.db', { seedIfNew: 1000 }));
}

export default defineAgent({
  name: 'migrate-rows',
  settings: { stepCap: 60 },
  offlineModel: () => new ScriptedMigrationModel(),
  tools: [
    tool({
      name: 'inspect_tables',
      description: 'Count the rows in the source and target tables and give the highest source id.',
      input: z.object({}),
      sideEffect: false,
      run: () => {
        const d = migrationDb();
        const n = (sql: string) => (d.prepare(sql).get() as { n: number | null }).n ?? 0;
        return { sourceRows: n('SELECT count(*) AS n FROM source'), targetRows: n('SELECT count(*) AS n FROM target'), maxSourceId: n('SELECT max(id) AS n FROM source') };
      },
    }),
    tool({
      name: 'copy_batch',
      description: 'Copy up to `limit` source rows with id greater than `afterId` into target. Returns the number copied and the last id.',
      input: z.object({ afterId: z.number().int().nonnegative(), limit: z.number().int().min(1).max(1000) }),
      sideEffect: true,
      run: async (input, ctx) => {
        const d = migrationDb();
        const args = canonicalJson(input);
        const result = d.transaction(() => {
          const seen = d.prepare('SELECT args, result FROM applied_keys WHERE key = ?').get(ctx.idempotencyKey) as { args: string; result: string } | undefined;
          if (seen) {
            if (seen.args !== args) throw new IdempotencyKeyReuseError(ctx.idempotencyKey);
            return { ...(JSON.parse(seen.result) as object), applied: false, note: 'already applied under this idempotency key' };
          }
          const rows = d.prepare('SELECT id, name, amount FROM source WHERE id > ? ORDER BY id LIMIT ?').all(input.afterId, input.limit) as { id: number; name: string; amount: number }[];
          const insert = d.prepare('INSERT INTO target (source_id, name, amount) VALUES (?, ?, ?)');
          for (const r of rows) insert.run(r.id, r.name, r.amount);
          const outcome = { copied: rows.length, lastId: rows.at(-1)?.id ?? input.afterId, checksum: createHash('sha256').update(rows.map((r) => r.id).join(',')).digest('hex').slice(0, 12) };
          d.prepare('INSERT INTO applied_keys (key, args, result) VALUES (?, ?, ?)').run(ctx.idempotencyKey, args, JSON.stringify(outcome));
          return { ...outcome, applied: true };
        })();
        await holdForDemo(ctx.step);
        return result;
      },
    }),
    tool({
      name: 'drop_source',
      description: 'Drop the source table (its rows go to an archive the application never reads). Only after a verified copy.',
      input: z.object({ confirm: z.literal('DROP TABLE source') }),
      sideEffect: true,
      // The risky step waits for a person: the engine asks for this call, the run saves a waiting
      // checkpoint and no process is needed; only an approval runs the call.
      approval: { approvers: [process.env.DEMO_APPROVER ?? 'ops@example.com'], timeoutMs: 24 * 3600 * 1000 },
      run: (_input, ctx) => {
        const d = migrationDb();
        // The key goes in with the effect, in one transaction: a redo after a crash drops nothing twice.
        return d.transaction(() => {
          if (d.prepare('SELECT 1 FROM applied_keys WHERE key = ?').get(ctx.idempotencyKey)) return { dropped: 'source', applied: false };
          const rows = d.prepare('INSERT INTO source_archive SELECT id, name, amount FROM source').run().changes;
          d.exec('DELETE FROM source');
          d.prepare('INSERT INTO applied_keys (key, args, result) VALUES (?, ?, ?)').run(ctx.idempotencyKey, '{}', JSON.stringify({ dropped: rows }));
          return { dropped: 'source', rows, applied: true };
        })();
      },
    }),
    tool({
      name: 'verify',
      description: 'Check that every source row is in target exactly once with the same values.',
      input: z.object({}),
      sideEffect: false,
      run: () => checkMigration(migrationDb()),
    }),
  ],
});

/**
 * The demo kills a worker between a step's effect and its checkpoint (crash point C4). It asks for that
 * moment with DEMO_HOLD_AFTER_STEP: the tool says so on stderr and waits to be killed.
 */
async function holdForDemo(step: number): Promise<void> {
  if (process.env.DEMO_HOLD_AFTER_STEP !== String(step)) return;
  process.stderr.write(`demo-hold: step ${step} copied its rows and is holding before its checkpoint\n`);
  await new Promise((resolve) => setTimeout(resolve, 60_000));
}
