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
    let released = false;
    setTimeout(() => { holder.exec('ROLLBACK'); released = true; }, 300);
    let done = false;
    const brownout = backend.brownout!(2000).finally(() => { done = true; });
    // Once the holder lets go, the brownout holds the lock itself: a writer that does not wait is refused.
    const probe = new Database(join(dir, 'stepwise.db'), { timeout: 0 });
    let refusedAfterRelease = false;
    while (!done && !refusedAfterRelease) {
      await new Promise((res) => setTimeout(res, 20));
      if (!released) continue;
      try { probe.exec('BEGIN IMMEDIATE'); probe.exec('ROLLBACK'); } catch (err) {
        expect((err as { code?: string }).code).toBe('SQLITE_BUSY');
        refusedAfterRelease = true;
      }
    }
    await brownout;
    expect(released).toBe(true);
    expect(refusedAfterRelease).toBe(true);
    // And it let the lock go: the same writer gets it at once.
    probe.exec('BEGIN IMMEDIATE');
    probe.exec('ROLLBACK');
    probe.close();
    holder.close();
  }, 30_000);
});
