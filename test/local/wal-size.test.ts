import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { WAL_SIZE_LIMIT_BYTES } from '../../lib/local/database.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { ManualClock, tempDb } from '../support/harness.ts';

/**
 * A worker keeps the file open for weeks, so SQLite's removal of the -wal at the last close never comes.
 * Without a size limit the -wal kept the largest size it ever reached: 604 MB after a reader held one
 * snapshot for 30 s under two busy workers (16 MB of database), 21 MB after one step's 20 MB output, for
 * as long as any worker ran.
 */
describe('the -wal of a file its workers keep open', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: { close(): void }[] = [];
  afterEach(() => {
    for (const c of opened.splice(0).reverse()) c.close();
    db?.cleanup();
  });

  const walBytes = () => statSync(`${db.path}-wal`).size;
  const open = (): LocalRuntime => {
    const runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    opened.push(runtime);
    return runtime;
  };
  /** Small writes, each a commit of its own through one of the runtime's connections, as a worker's steps are. */
  const smallWrites = async (runtime: LocalRuntime, n: number) => {
    for (let i = 0; i < n; i++) await runtime.blobs.put(`small-${i}-${Math.random()}`, randomBytes(100));
    for (let i = 0; i < n; i++) runtime.db.pragma(`user_version = ${runtime.db.pragma('user_version', { simple: true }) as number}`);
  };

  it('shrinks back to the limit after one write larger than it, the connections still open', async () => {
    db = tempDb();
    const runtime = open();
    // Random bytes: the blob store compresses what it can, and this it cannot.
    await runtime.blobs.put('large', randomBytes(WAL_SIZE_LIMIT_BYTES + 8 * 2 ** 20));
    expect(walBytes()).toBeGreaterThan(WAL_SIZE_LIMIT_BYTES);
    await smallWrites(runtime, 3);
    expect(walBytes()).toBeLessThanOrEqual(WAL_SIZE_LIMIT_BYTES);
  });

  it('grows while another process holds a read open, and shrinks back to the limit once it ends', async () => {
    db = tempDb();
    const runtime = open();
    await smallWrites(runtime, 1);
    // A sqlite3 shell left inside BEGIN after a SELECT: no checkpoint may pass its snapshot.
    const reader = new Database(db.path);
    opened.push(reader);
    reader.exec('BEGIN');
    reader.prepare('SELECT count(*) FROM runs').get();
    for (let i = 0; i < 12; i++) await runtime.blobs.put(`chunk-${i}`, randomBytes(2 ** 20 * 2));
    expect(walBytes()).toBeGreaterThan(WAL_SIZE_LIMIT_BYTES);
    reader.exec('COMMIT');
    // The first commit after the reader ends copies the whole -wal into the file (a WAL checkpoint); the next ones start it again.
    await smallWrites(runtime, 3);
    expect(walBytes()).toBeLessThanOrEqual(WAL_SIZE_LIMIT_BYTES);
  });
});
