import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openProcessBackend, type ProcessBackend } from '../../bench/chaos/process-backends.ts';

describe('chaos: the SQLite brownout of the process schedules', () => {
  let dir: string;
  let backend: ProcessBackend | undefined;
  afterEach(async () => {
    await backend?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  // In the schedules, the write lock can be held by a SIGSTOPped worker, and only the schedule's own timer
  // sends it SIGCONT. A brownout that waited for the lock by blocking the event loop would keep that timer
  // from firing until its lock wait gave up: here, the holder's release is such a timer.
  it('waits for a lock held by someone this process must still run a timer for, then holds it itself', async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-brownout-'));
    backend = await openProcessBackend('local', dir, 1);
    const holder = new Database(join(dir, 'stepwise.db'));
    holder.exec('BEGIN IMMEDIATE');
    let released = 0;
    setTimeout(() => { holder.exec('ROLLBACK'); released = Date.now(); }, 300);
    await backend.brownout!(100);
    expect(released).toBeGreaterThan(0);
    // The brownout held the lock itself, and let it go: another writer gets it at once.
    holder.pragma('busy_timeout = 0');
    holder.exec('BEGIN IMMEDIATE');
    holder.exec('ROLLBACK');
    holder.close();
  }, 30_000);
});
