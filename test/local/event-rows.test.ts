import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';
import { writeOldFile } from '../support/old-files.ts';

let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

describe('kept events in a file an older release wrote', () => {
  it('keyed by their id alone: re-keyed by type, key and id on open, every row kept, and a reused id kept as its own event', async () => {
    db = tempDb();
    const now = Date.now();
    writeOldFile(db.path, `CREATE TABLE events (id TEXT PRIMARY KEY, type_key TEXT NOT NULL, payload TEXT NOT NULL, received_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
      CREATE INDEX events_by_type_key ON events (type_key, received_at);
      INSERT INTO events VALUES ('ev1', 'order.paid' || char(10) || 'o1', '{"n":1}', ${now}, ${now + 86_400_000});`);
    const runtime = openLocalRuntime({ dbPath: db.path });
    try {
      expect((await runtime.events.find('order.paid', 'o1', 0)).map((e) => [e.id, e.payload])).toEqual([['ev1', { n: 1 }]]);
      // Before, "seen before" and dropped: the old key held one row per id.
      expect(await runtime.events.put({ id: 'ev1', type: 'order.shipped', key: 'o1', payload: { n: 2 }, receivedAt: now })).toBe(true);
      expect(await runtime.events.put({ id: 'ev1', type: 'order.paid', key: 'o1', payload: { n: 3 }, receivedAt: now })).toBe(false);
      expect((await runtime.events.find('order.shipped', 'o1', 0)).map((e) => e.payload)).toEqual([{ n: 2 }]);
    } finally {
      runtime.close();
    }
    const file = new Database(db.path, { readonly: true });
    try {
      const keys = file.prepare("SELECT name FROM pragma_table_info('events') WHERE pk > 0 ORDER BY pk").all() as { name: string }[];
      expect(keys.map((k) => k.name)).toEqual(['type_key', 'id']);
      expect(file.prepare("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'events_by_type_key'").get()).toBeDefined();
    } finally {
      file.close();
    }
  });
});
