import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { IdempotencyInProgressError } from '../../lib/core/errors.ts';
import { openDatabase } from '../../lib/local/database.ts';
import { SqliteLedger, hashArgs } from '../../lib/local/sqlite-ledger.ts';
import { idempotencyLedgerContract } from '../contract/idempotency-ledger-contract.ts';
import { ManualClock } from '../support/manual-clock.ts';

const dir = mkdtempSync(join(tmpdir(), 'stepwise-ledger-'));
const db = openDatabase(join(dir, 'ledger.db'));
afterAll(() => { db.close(); rmSync(dir, { recursive: true, force: true }); });

idempotencyLedgerContract('SQLite', () => ({
  ledger: (clock) => new SqliteLedger(db, clock),
  setFormat: async (key, format) => { db.prepare('UPDATE ledger SET format = ? WHERE key = ?').run(format, key); },
}));

describe('SQLite ledger on a file written before claims had owners', () => {
  it('gains the owner column on open; an old in-progress claim blocks until its lease ends, then is taken over', async () => {
    const path = join(dir, 'old.db');
    const old = new Database(path);
    old.exec(`CREATE TABLE ledger (key TEXT PRIMARY KEY, args_hash TEXT NOT NULL, status TEXT NOT NULL, result TEXT,
      lease_until INTEGER NOT NULL, updated_at INTEGER NOT NULL)`);
    const clock = new ManualClock();
    old.prepare("INSERT INTO ledger VALUES ('old/step-1', ?, 'in_progress', NULL, ?, 0), ('old/step-2', ?, 'completed', '\"done before\"', 0, 0)")
      .run(hashArgs({}), clock.now() + 5_000, hashArgs({}));
    old.close();

    const upgraded = openDatabase(path);
    const again = openDatabase(path);
    try {
      const columns = (upgraded.prepare("SELECT name FROM pragma_table_info('ledger')").all() as { name: string }[]).map((c) => c.name);
      expect(columns).toContain('owner');
      const ledger = new SqliteLedger(again, clock);
      await expect(ledger.once('old/step-1', {}, async () => 'too early')).rejects.toBeInstanceOf(IdempotencyInProgressError);
      expect(await ledger.once('old/step-2', {}, async () => 'not again')).toBe('done before');
      clock.advance(5_001);
      expect(await ledger.once('old/step-1', {}, async () => 'taken over')).toBe('taken over');
    } finally {
      upgraded.close();
      again.close();
    }
  });
});

describe('SQLite ledger when the file is locked past the busy timeout', () => {
  it('tries a completion refused with SQLITE_BUSY again: the effect is on record and never runs again', async () => {
    const path = join(dir, 'busy.db');
    const mine = openDatabase(path);
    const other = new Database(path);
    try {
      // Another process holds the write lock from inside the effect until a while after it returned.
      mine.pragma('busy_timeout = 20');
      const ledger = new SqliteLedger(mine, new ManualClock());
      let runs = 0;
      let released: Promise<void> | undefined;
      const result = await ledger.once('busy-1', { n: 1 }, async () => {
        runs++;
        other.prepare('BEGIN IMMEDIATE').run();
        released = new Promise((resolve) => setTimeout(() => { other.prepare('COMMIT').run(); resolve(); }, 150));
        return 'done';
      });
      await released;
      expect(result).toBe('done');
      expect(mine.prepare("SELECT status, result FROM ledger WHERE key = 'busy-1'").get()).toEqual({ status: 'completed', result: '"done"' });
      // The key is completed: a later attempt gets the result without running the effect.
      expect(await new SqliteLedger(mine, new ManualClock()).once('busy-1', { n: 1 }, async () => { runs++; return 'again'; })).toBe('done');
      expect(runs).toBe(1);
    } finally {
      if (other.inTransaction) other.prepare('ROLLBACK').run();
      other.close();
      mine.close();
    }
  });
});

describe('SQLite ledger: a holder whose renewals the locked file refuses', () => {
  it('aborts its effect\'s signal half a second inside its lease, before another process may take the key over', async () => {
    const clock = new ManualClock().onMachine();
    const ledger = new SqliteLedger(db, clock);
    let signal: AbortSignal | undefined;
    let finish!: () => void;
    const done = ledger.once('renewals-refused/step-1', {}, (s) => { signal = s; return new Promise<string>((resolve) => { finish = () => resolve('late'); }); }, { leaseMs: 60_000 });
    await Promise.resolve();
    while (!signal) await new Promise((resolve) => setImmediate(resolve));
    (ledger as unknown as { renew: () => boolean }).renew = () => { throw Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' }); };
    await clock.pass(59_400);
    expect(signal.aborted).toBe(false);
    // Was: only at the renewal tick at 60 s, when the lease had ended and the key was another process's to take.
    await clock.pass(350);
    expect(signal.reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('no renewal was confirmed for 59500 ms') });
    finish();
    await done.catch(() => undefined);
  });
});

describe('SQLite ledger: workers whose clocks differ (the README\'s "What ctx.once guarantees")', () => {
  // Each worker judges a claim's lease by its own clock, and a live holder's lease runs at least two thirds
  // of it ahead of the holder's clock (renewed every third): that much difference is what a claim survives.
  for (const [ahead, takes] of [[39_000, false], [41_000, true]] as const) {
    it(`a worker ${ahead / 1000} s ahead of a live holder ${takes ? 'takes its key (beyond two thirds of a 60 s lease)' : 'waits for it'}`, async () => {
      const clock = new ManualClock();
      const holder = new SqliteLedger(db, clock);
      const other = new SqliteLedger(db, { now: () => clock.now() + ahead });
      let finish!: () => void;
      const running = holder.once(`skew-${ahead}/step-1`, {}, () => new Promise<string>((resolve) => { finish = () => resolve('first'); }));
      await new Promise((resolve) => setImmediate(resolve));
      // Just before the holder's second renewal: its lease runs 40 s past its clock.
      await clock.pass(39_999);
      const second = other.once(`skew-${ahead}/step-1`, {}, async () => 'second');
      if (takes) await expect(second).resolves.toBe('second');
      else await expect(second).rejects.toBeInstanceOf(IdempotencyInProgressError);
      finish();
      await running;
    });
  }
});
