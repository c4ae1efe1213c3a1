/**
 * The agent that real worker processes run in the process tests. Its side effect goes to a separate
 * SQLite "effects" database (EFFECTS_DB) that checks the idempotency key in the same transaction as the
 * write, and logs every call it receives, so a test can count calls and applications across processes.
 */
import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { promptText } from '../../lib/core/prompt.ts';
import { completedSteps } from './stub-model.ts';

const ROWS = Number(process.env.PROCESS_AGENT_ROWS ?? 12);
/** Input tokens each reply reports (none by default), so budgets can be tried through the CLI. */
const TOKENS = Number(process.env.PROCESS_AGENT_TOKENS ?? 0);
/** Steps whose output is large enough to be stored by reference (comma-separated). */
const LARGE_AT = (process.env.PROCESS_AGENT_LARGE_AT ?? '').split(',').filter(Boolean).map(Number);
/** Set: the effect runs inside `ctx.once`, its claim leased for this many ms (renewed while the holder runs). */
const ONCE_LEASE_MS = Number(process.env.PROCESS_AGENT_ONCE_LEASE_MS ?? 0);
/**
 * The step whose effect holds for PROCESS_AGENT_HOLD_MS after it logged the call and before it writes,
 * so a test can stop the process in the middle of it.
 */
const HOLD_AT = Number(process.env.PROCESS_AGENT_HOLD_AT ?? 0);
const HOLD_MS = Number(process.env.PROCESS_AGENT_HOLD_MS ?? 400);
/**
 * A file: every run's last step waits for it to exist, after it logged the call and before it writes, so
 * a test can keep its runs open until it has done all its faults, however fast the steps are.
 */
const GATE = process.env.PROCESS_AGENT_GATE;

let db: Database.Database | undefined;
function effects(): Database.Database {
  if (!db) {
    db = new Database(process.env.EFFECTS_DB ?? 'effects.db');
    db.pragma('journal_mode = WAL');
    db.pragma('busy_timeout = 10000');
    db.exec('CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, row INTEGER NOT NULL); CREATE TABLE IF NOT EXISTS received (id INTEGER PRIMARY KEY, key TEXT NOT NULL, pid INTEGER NOT NULL)');
  }
  return db;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

class RowsModel implements Model {
  readonly name = 'process-test-rows';
  async decide(request: ModelRequest): Promise<ModelReply> {
    // A model call takes time, so kills also land between the model and the tool.
    await pause(5 + Math.random() * 20);
    const next = completedSteps(promptText(request.prompt)) + 1;
    // With usage, the model that spent it, as Claude's replies name theirs: the CLI prices it at Opus 5.5.
    const usage = TOKENS ? { usage: { inputTokens: TOKENS, outputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0 }, model: 'claude-opus-5-5' } : {};
    return next <= ROWS ? { kind: 'tool', tool: 'write_row', input: { row: next }, ...usage } : { kind: 'done', summary: `wrote ${ROWS} rows`, ...usage };
  }
}

export default defineAgent({
  name: 'process-rows',
  offlineModel: () => new RowsModel(),
  tools: [tool({
    name: 'write_row',
    description: 'Write one row, once per idempotency key.',
    input: z.object({ row: z.number().int() }),
    sideEffect: true,
    run: (input, ctx) => {
      const effect = async () => {
        const d = effects();
        d.prepare('INSERT INTO received (key, pid) VALUES (?, ?)').run(ctx.idempotencyKey, process.pid);
        await pause(ctx.step === HOLD_AT ? HOLD_MS : Math.random() * 30);
        while (GATE && ctx.step === ROWS && !existsSync(GATE)) await pause(20);
        const applied = d.prepare('INSERT OR IGNORE INTO applied (key, row) VALUES (?, ?)').run(ctx.idempotencyKey, input.row).changes === 1;
        await pause(Math.random() * 30);
        return LARGE_AT.includes(ctx.step) ? { applied, log: `${'row data '.repeat(1500)}end of log ${ctx.step}` } : { applied };
      };
      return ONCE_LEASE_MS ? ctx.once(effect, { leaseMs: ONCE_LEASE_MS }) : effect();
    },
  })],
});
