import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { WAL_WARN_BYTES } from '../../lib/local/wal-watch.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());

describe('stepwise worker and a -wal that keeps growing', () => {
  it('warns at start, naming the file and the cause, where only a filling disk showed it', async () => {
    const runtime = openLocalRuntime({ dbPath: db.path });
    await runtime.blobs.put('first', randomBytes(100));
    // A sqlite3 shell left inside BEGIN: no WAL checkpoint may pass its snapshot, so the -wal only grows.
    const reader = new Database(db.path);
    reader.exec('BEGIN');
    reader.prepare('SELECT count(*) FROM runs').get();
    try {
      for (let written = 0; written <= WAL_WARN_BYTES; written += 2 ** 21) await runtime.blobs.put(`chunk-${written}`, randomBytes(2 ** 21));
      expect(statSync(`${db.path}-wal`).size).toBeGreaterThan(WAL_WARN_BYTES);
      const worker = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '200'], {
        STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), STEPWISE_LOG_LEVEL: 'warn', STEPWISE_LOG_FORMAT: 'json',
      });
      expect(worker.code).toBe(0);
      const line = worker.err.split('\n').find((l) => l.includes('"event":"wal-large"'));
      expect(line).toBeDefined();
      const parsed = JSON.parse(line!) as { file: string; walBytes: number; msg: string };
      expect(parsed.file).toBe(db.path);
      expect(parsed.walBytes).toBeGreaterThan(WAL_WARN_BYTES);
      expect(parsed.msg).toContain('a sqlite3 shell inside BEGIN');
    } finally {
      reader.exec('COMMIT');
      reader.close();
      runtime.close();
    }
  }, 60_000);
});
