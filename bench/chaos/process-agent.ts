/**
 * The agent of the chaos command's real worker processes. Its effect goes to a separate SQLite "effects"
 * database (CHAOS_EFFECTS_DB) with its key, in one transaction, inside `ctx.once` with a short lease;
 * some effects run longer than the lease (renewed while the holder lives), so SIGKILLs land inside
 * `ctx.once` and inside long effects; some never return, and their try ends at the tool's timeoutMs. The
 * model decides from the prompt, as a real one would.
 *
 * One key in two has an effect that trusts the ledger alone, as a call to an API that takes no key of its
 * own would: it counts every application, and checks its signal just before it acts, which is all
 * `ctx.once` asks of it. The others store their key with the effect, and a second application writes
 * nothing (CHAOS_SABOTAGE=effect-ignores-key makes them count too).
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { TransientError } from '../../lib/core/errors.ts';
import { isBusy } from '../../lib/local/database.ts';
import { promptText } from '../../lib/core/prompt.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { completedSteps } from '../../test/support/stub-model.ts';

const STEPS = Number(process.env.CHAOS_STEPS ?? 8);
const IGNORES_KEY = process.env.CHAOS_SABOTAGE === 'effect-ignores-key';

/** Whether `key`'s effect trusts the ledger alone: one key in two, the same one in every process. */
const ledgerOnly = (key: string): boolean => createHash('sha256').update(key).digest()[0]! < 128;

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The machine's wall clock, stepped by the schedule (process-schedule.ts): Date.now() is off by the offset
 * in CHAOS_CLOCK_FILE, read again at each SIGUSR2, as after NTP or `date -s` every process's reading is;
 * the monotonic clock (timers, process.hrtime, the ledger's machine time) does not move. Every reading of
 * the wall clock in lib/ is Date.now() at the time of the call (systemClock).
 */
if (process.env.CHAOS_CLOCK_FILE) {
  const file = process.env.CHAOS_CLOCK_FILE;
  const wall = Date.now.bind(Date);
  const offsetNow = (): number => { try { return Number(readFileSync(file, 'utf8')) || 0; } catch { return 0; } };
  let offset = offsetNow();
  Date.now = () => wall() + offset;
  process.on('SIGUSR2', () => { offset = offsetNow(); });
}

const HANG_LIMIT_MS = 3_000;
/** The steps whose first try never returns, as the schedule drew them from its seed (process-schedule.ts). */
const HANG_KEYS = new Set((process.env.CHAOS_HANG_KEYS ?? '').split(',').filter(Boolean));

/** An effect that never returns (a lost reply, a lock never given back), counted for the totals. */
async function hangHere(key: string, at: 'before' | 'after'): Promise<never> {
  await inWriteLock((w) => w.prepare('INSERT INTO hung_tools (key, at) VALUES (?, ?)').run(key, at));
  return new Promise<never>(() => {});
}

let db: Database.Database | undefined;
function effects(): Database.Database {
  if (!db) {
    db = new Database(process.env.CHAOS_EFFECTS_DB ?? 'effects.db');
    db.pragma('journal_mode = WAL');
    db.pragma('busy_timeout = 10000');
    // applied: the effect, stored with its key (a second application finds the key and writes nothing);
    // ledger_only: each application of a ledger-only effect, by which process and when (real time, which the
    // stepped Date.now() is not), so the schedule can tell one its holder's kill or freeze explains;
    // long_effects: effects that outlived their lease; hung_tools: effects that never returned; model_calls:
    // one row per model call (with the fault injected into it, if any), for the totals.
    db.exec(`CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, n INTEGER NOT NULL, times INTEGER NOT NULL DEFAULT 1);
      CREATE TABLE IF NOT EXISTS long_effects (id INTEGER PRIMARY KEY, key TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS hung_tools (id INTEGER PRIMARY KEY, key TEXT NOT NULL, at TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS model_calls (id INTEGER PRIMARY KEY, fault TEXT);
      CREATE TABLE IF NOT EXISTS ledger_only (id INTEGER PRIMARY KEY, key TEXT NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL)`);
  }
  return db;
}

let writer: Database.Database | undefined;
/**
 * Runs `write` in a transaction of the effects database, the write lock taken without blocking: every
 * write of the agent goes through here. A worker stopped inside one of its writes holds the lock for
 * seconds, and SQLite's busy wait would block this event loop meanwhile: the ledger's renewals and its
 * give-up could not run, and an effect of another step of this worker, resumed by a timer due before
 * theirs, would check a signal not yet told of a takeover.
 */
async function inWriteLock(write: (db: Database.Database) => unknown): Promise<void> {
  effects();
  writer ??= new Database(process.env.CHAOS_EFFECTS_DB ?? 'effects.db', { timeout: 0 });
  for (;;) {
    try {
      writer.exec('BEGIN IMMEDIATE');
      break;
    } catch (error) {
      if (!isBusy(error)) throw error;
      await pause(5);
    }
  }
  try {
    write(writer);
    writer.exec('COMMIT');
  } catch (error) {
    if (writer.inTransaction) writer.exec('ROLLBACK');
    throw error;
  }
}

class ChaosModel implements Model {
  readonly name = 'chaos-process-model';
  async decide(request: ModelRequest): Promise<ModelReply> {
    const fault = Math.random() < 0.05 ? 'injected 529 overloaded_error' : null;
    await inWriteLock((w) => w.prepare('INSERT INTO model_calls (fault) VALUES (?)').run(fault));
    await pause(5 + Math.random() * 30);
    if (fault) throw new TransientError(fault);
    const next = completedSteps(promptText(request.prompt)) + 1;
    return next <= STEPS ? { kind: 'tool', tool: 'write_row', input: { n: next } } : { kind: 'done', summary: `wrote ${STEPS} rows` };
  }
}

export default defineAgent({
  name: 'chaos-process',
  offlineModel: () => new ChaosModel(),
  tools: [tool({
    name: 'write_row',
    description: 'Write one row, with its key, once.',
    input: z.object({ n: z.number().int().positive() }),
    sideEffect: true,
    // Above the longest effect (2 s): only a hung one reaches it.
    timeoutMs: HANG_LIMIT_MS,
    run: (input, ctx) => ctx.once(async (signal) => {
      // One effect in eight outlives its lease: the holder's renewals must keep the key.
      const long = Math.random() < 0.125;
      if (long) await inWriteLock((w) => w.prepare('INSERT INTO long_effects (key) VALUES (?)').run(ctx.idempotencyKey));
      // Some first tries never return (the schedule's CHAOS_HANG_KEYS), before or after their effect: the
      // try ends at the limit, the claim is no longer renewed, and the next try takes the key when its
      // lease ends. Only a first try, so no step fails its run for it.
      // A ledger-only effect hangs only before it acts: after, it is the case nothing can tell apart (the
      // next try cannot know it happened), as a kill or a freeze there is.
      const trusting = ledgerOnly(ctx.idempotencyKey);
      const hang = ctx.attempt === 1 && HANG_KEYS.has(ctx.idempotencyKey) ? (trusting || Math.random() < 0.5 ? 'before' : 'after') : undefined;
      if (hang === 'before') return hangHere(ctx.idempotencyKey, hang);
      await pause(long ? 1200 + Math.random() * 800 : Math.random() * 40);
      await inWriteLock((w) => {
        // Checked once the lock is held: a wait for the lock let the ledger's timers run, so the check is as
        // fresh as the last of them. A claim is lost here only to a kill, a freeze or a brownout the schedule
        // injected, and the reason says so: a run whose step fails for it enough times fails for a fault injected.
        if (trusting && signal.aborted) throw new TransientError(`claim lost to an injected kill, freeze or brownout: ${signal.reason instanceof Error ? signal.reason.message : String(signal.reason)}`);
        // The key stored with the effect: a second application finds it and writes nothing. A ledger-only
        // effect, and a planted defect (CHAOS_SABOTAGE=effect-ignores-key), count each application.
        const seen = w.prepare(`UPDATE applied SET times = times${IGNORES_KEY || trusting ? ' + 1' : ''} WHERE key = ?`).run(ctx.idempotencyKey).changes === 1;
        if (!seen) w.prepare('INSERT INTO applied (key, n) VALUES (?, ?)').run(ctx.idempotencyKey, input.n);
        if (trusting) w.prepare('INSERT INTO ledger_only (key, pid, at) VALUES (?, ?, ?)').run(ctx.idempotencyKey, process.pid, performance.timeOrigin + performance.now());
      });
      if (hang === 'after') return hangHere(ctx.idempotencyKey, hang);
      await pause(Math.random() * 40);
      return { n: input.n };
    }, { leaseMs: 1000 }),
  })],
});
