import { afterEach, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { OLD_RUNS_TABLE, writeOldFile } from '../support/old-files.ts';

describe('the local queue and several agents', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('tags the waiting messages of a file from before agents were on the queue, when it is opened', async () => {
    db = tempDb();
    // The queue and runs tables as the previous release created them, with one waiting message per run.
    writeOldFile(db.path, `${OLD_RUNS_TABLE}
      CREATE TABLE queue (id INTEGER PRIMARY KEY, dedup_key TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, body TEXT NOT NULL,
        visible_at INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0, receipt TEXT, acked_at INTEGER, created_at INTEGER NOT NULL);
      INSERT INTO runs VALUES ('m1', 3, 'running', 2, 'migrate-rows', NULL, 1, 1), ('c1', 1, 'running', 0, 'cleanup-tables', NULL, 1, 1);
      INSERT INTO queue (dedup_key, run_id, body, visible_at, created_at) VALUES
        ('m1/v3', 'm1', '{"runId":"m1","version":3}', 0, 0), ('c1/v1', 'c1', '{"runId":"c1","version":1}', 0, 0),
        ('raw/1', '', 'not json', 0, 0);
    `);

    const clock = new ManualClock();
    const first = openLocalRuntime({ dbPath: db.path, clock });
    const second = openLocalRuntime({ dbPath: db.path, clock }); // another process opening the same file
    try {
      const cleanup = first.queue.forAgents(['cleanup-tables']);
      expect(first.queue.waitingForOthers(['cleanup-tables'])).toEqual([{ agent: 'migrate-rows', messages: 1 }]);
      const taken = await cleanup.receive({ max: 10 });
      // Its own run's message, and the malformed one (no run: any worker drops it); never the migration's.
      expect(taken.map((d) => d.body).sort()).toEqual(['not json', '{"runId":"c1","version":1}']);
      const migrate = second.queue.forAgents(['migrate-rows']);
      expect((await migrate.receive({ max: 10 })).map((d) => d.body)).toEqual(['{"runId":"m1","version":3}']);
    } finally {
      first.close();
      second.close();
    }
  });
});
