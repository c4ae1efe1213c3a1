import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { LAYOUT_VERSION } from '../../lib/local/database.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { ManualClock, tempDb } from '../support/harness.ts';
import { keyCheckpointsAsBefore } from '../support/old-files.ts';
import { META, newState } from '../support/states.ts';

const layoutOf = (path: string) => {
  const file = new Database(path, { readonly: true });
  try {
    return { layout: file.pragma('user_version', { simple: true }), tables: file.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all() };
  } finally {
    file.close();
  }
};

describe("the SQLite file's layout version", () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('is stamped on a new file, and on an older file once it is brought to this layout', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('r'), META);
    runtime.close();
    expect(layoutOf(db.path).layout).toBe(LAYOUT_VERSION);

    keyCheckpointsAsBefore(db.path);
    const unstamped = new Database(db.path);
    unstamped.pragma('user_version = 0');
    unstamped.close();
    openLocalRuntime({ dbPath: db.path }).close();
    expect(layoutOf(db.path).layout).toBe(LAYOUT_VERSION);
  });

  it('refuses a file of a newer layout before writing anything to it, and the CLI says so in one line (exit 2)', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    await runtime.store.create(newState('r'), META);
    runtime.close();
    // A newer release's file: stamped past this code's layout, an index of ours gone from it.
    const newer = new Database(db.path);
    newer.exec('DROP INDEX runs_by_wait_event');
    newer.pragma(`user_version = ${LAYOUT_VERSION + 1}`);
    newer.close();
    const before = layoutOf(db.path);

    expect(() => openLocalRuntime({ dbPath: db.path })).toThrow(InvalidInputError);
    expect(() => openLocalRuntime({ dbPath: db.path })).toThrow(`has layout ${LAYOUT_VERSION + 1}, written by a newer stepwise release; this one reads layouts up to ${LAYOUT_VERSION}`);
    for (const args of [['status'], ['worker', '--agent', join(ROOT, 'test/support/process-agent.ts')]]) {
      const cli = await stepwiseCli([...args, '--db', db.path], { STEPWISE_LOG_FORMAT: 'json' });
      expect(cli.code).toBe(2);
      expect(cli.err.trim().split('\n')).toEqual([expect.stringMatching(/^stepwise: the database .* has layout \d+, written by a newer stepwise release/)]);
    }
    expect(layoutOf(db.path)).toEqual(before);
  });
});
