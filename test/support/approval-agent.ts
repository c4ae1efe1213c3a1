/**
 * The agent the approval end-to-end tests run in real worker processes: it copies a row, asks for
 * approval to drop the old table, drops it only if approved. The drop is recorded in EFFECTS_DB with the
 * idempotency key in the same transaction, so a test can count applications across processes. Its goal
 * and request carry hostile HTML, which every page must show as text.
 */
import Database from 'better-sqlite3';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { requestApproval } from '../../lib/waits/tools.ts';
import { ApprovalFlowModel } from './wait-agent.ts';

export const HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>';

function effects(): Database.Database {
  const db = new Database(process.env.EFFECTS_DB ?? 'effects.db');
  db.pragma('journal_mode = WAL');
  db.pragma('busy_timeout = 10000');
  db.exec('CREATE TABLE IF NOT EXISTS dropped (key TEXT PRIMARY KEY, tbl TEXT NOT NULL, pid INTEGER NOT NULL)');
  return db;
}

export default defineAgent({
  name: 'approval-e2e',
  offlineModel: () => new ApprovalFlowModel(`Drop table old_rows ${HOSTILE}`),
  tools: [
    tool({
      name: 'write_row', description: 'Copy one row.', input: z.object({ row: z.number().int() }), sideEffect: true,
      run: (input) => ({ copied: input.row }),
    }),
    tool({
      name: 'drop_table', description: 'Drop a table (irreversible).', input: z.object({ table: z.string() }), sideEffect: true,
      run: (input, ctx) => {
        const db = effects();
        try {
          const applied = db.prepare('INSERT OR IGNORE INTO dropped (key, tbl, pid) VALUES (?, ?, ?)').run(ctx.idempotencyKey, input.table, process.pid).changes === 1;
          return { dropped: input.table, applied };
        } finally {
          db.close();
        }
      },
    }),
    requestApproval({ approvers: ['ops@example.com'], timeoutMs: Number(process.env.APPROVAL_TIMEOUT_MS ?? 3_600_000) }),
  ],
});
