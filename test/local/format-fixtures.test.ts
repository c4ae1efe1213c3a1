import { FORMAT_VERSION, RECORD_FORMATS } from '../../lib/core/state.ts';
import { copyFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { LAYOUT_VERSION } from '../../lib/local/database.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { FIXTURE_EPOCH, fixtureFormats, fixtureName, fixturePath, loadResumeComplete } from '../fixtures/formats/resume.ts';
import { ManualClock, tempDb } from '../support/harness.ts';

describe('checkpoint fixtures of every released format, SQLite', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('keeps a fixture of every format up to today\'s', () => {
    expect([...new Set(fixtureFormats().map((f) => f.head))]).toEqual(Array.from({ length: FORMAT_VERSION }, (_, i) => i + 1));
    // Written by today's code: a record format or the layout moved on fails here until make-fixtures.ts is run.
    expect(fixtureFormats().map((f) => f.name), 'no fixture written at today\'s formats: run test/fixtures/make-fixtures.ts').toContain(fixtureName(RECORD_FORMATS, LAYOUT_VERSION));
  });

  it.each(fixtureFormats())('fixture $name: every run loads, resumes on today\'s code and completes', async ({ name }) => {
    db = tempDb();
    copyFileSync(fixturePath(name, 'sqlite.db'), db.path);
    const clock = new ManualClock(FIXTURE_EPOCH + 3600_000);
    const runtime = openLocalRuntime({ dbPath: db.path, clock });
    try {
      // Older files index runs by (status, updated_at) and the queue with its tombstones, pages every step rewrote: replaced on open.
      const indexes = (runtime.db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'").all() as { name: string }[]).map((r) => r.name);
      expect(indexes).toEqual(expect.arrayContaining(['runs_of_status', 'runs_ended_by_update']));
      expect(indexes).not.toContain('runs_by_status');
      const queueIndexes = (runtime.db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queue'").all() as { name: string }[]).map((r) => r.name);
      expect(queueIndexes).toContain('queue_live');
      expect(queueIndexes).not.toContain('queue_ready');
      await loadResumeComplete(name, runtime, clock);
      expect(await runtime.store.list({ status: 'completed' })).not.toEqual([]);
    } finally {
      runtime.close();
    }
  });
});
