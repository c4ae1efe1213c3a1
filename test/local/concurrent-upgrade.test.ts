import Database from 'better-sqlite3';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LAYOUT_VERSION } from '../../lib/local/database.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ROOT } from '../support/cli.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { keyCheckpointsAsBefore } from '../support/old-files.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';

const PROCESSES = 4;
const EVENTS = 50_000;
const STEPS = 20;

/** Opens the file in a process of its own at `goAt`; resolves with its exit code and output. */
function openAt(path: string, goAt: number): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', join(ROOT, 'test/support/open-file-at.ts'), path, String(goAt)], { cwd: ROOT }, (error, out, err) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, out, err });
    });
  });
}

describe('an older file opened by several processes at once', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /**
   * Workers of a new release started together on a file an older one wrote: each brings it to this layout
   * (checkpoints re-keyed by run number, events by type, key and id, the stamp) under the write lock, checked
   * again inside it, so one does each step and the others find it done: every row kept once, none fails.
   */
  it('is brought to this layout once: every process opens it, every checkpoint and event kept once', { timeout: 60_000 }, async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('r'), META);
    for (let n = 1; n <= STEPS; n++) await runtime.store.commit({ runId: 'r', expectedVersion: n, state: stateAfter('r', n), appended: recordFor('r', n), ...META });
    runtime.close();
    keyCheckpointsAsBefore(db.path);
    const old = new Database(db.path);
    const now = Date.now();
    old.exec(`DROP TABLE events;
      CREATE TABLE events (id TEXT PRIMARY KEY, type_key TEXT NOT NULL, payload TEXT NOT NULL, received_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
      CREATE INDEX events_by_type_key ON events (type_key, received_at);`);
    const insert = old.prepare('INSERT INTO events VALUES (?, ?, ?, ?, ?)');
    for (let i = 0; i < EVENTS; i++) insert.run(`ev${i}`, `order.paid\no${i % 7}`, JSON.stringify({ i }), now, now + 86_400_000);
    old.pragma('user_version = 0');
    old.close();

    // Started first, then released together: process start-up (a second or more) is not in the race.
    const goAt = Date.now() + 3_000;
    const opened = await Promise.all(Array.from({ length: PROCESSES }, () => openAt(db.path, goAt)));
    expect(opened.map((o) => [o.code, o.out.trim(), o.err.trim()])).toEqual(Array.from({ length: PROCESSES }, () => [0, String(STEPS + 1), '']));

    const file = new Database(db.path, { readonly: true });
    try {
      expect(file.pragma('user_version', { simple: true })).toBe(LAYOUT_VERSION);
      expect(file.prepare("SELECT name FROM pragma_table_info('events') WHERE pk > 0 ORDER BY pk").all()).toEqual([{ name: 'type_key' }, { name: 'id' }]);
      expect(file.prepare('SELECT count(*) AS n, count(DISTINCT id) AS ids FROM events').get()).toEqual({ n: EVENTS, ids: EVENTS });
      expect(file.prepare("SELECT count(*) AS n FROM checkpoints").get()).toEqual({ n: STEPS + 1 });
      expect(file.prepare("SELECT name FROM sqlite_master WHERE name LIKE '%_keyed' OR name LIKE '%_before'").all()).toEqual([]);
    } finally {
      file.close();
    }
  });
});
