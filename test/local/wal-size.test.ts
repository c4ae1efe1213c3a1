import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { WAL_SIZE_LIMIT_BYTES } from '../../lib/local/database.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { watchWal } from '../../lib/local/wal-watch.ts';
import { captureLogs } from '../aws/log-capture.ts';
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

describe('the warning of a -wal that keeps growing', () => {
  let db: ReturnType<typeof tempDb>;
  const opened: { close(): void }[] = [];
  afterEach(() => {
    for (const c of opened.splice(0).reverse()) c.close();
    db?.cleanup();
  });

  it('warns once past the threshold and again at each doubling, and says when the -wal is back', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    opened.push(runtime);
    const { log, lines } = captureLogs();
    // Just past the 16 MB the size limit leaves, so a -wal cut back to the limit is under it.
    const warnBytes = WAL_SIZE_LIMIT_BYTES + 2 ** 20;
    const watch = watchWal(db.path, log, { warnBytes, everyMs: 3_600_000 });
    await runtime.blobs.put('first', randomBytes(100));
    watch.look();
    expect(lines).toEqual([]);
    // A sqlite3 shell left inside BEGIN after a SELECT: no WAL checkpoint may pass its snapshot.
    const reader = new Database(db.path);
    opened.push(reader);
    reader.exec('BEGIN');
    reader.prepare('SELECT count(*) FROM runs').get();
    const grow = async (mb: number) => { for (let i = 0; i < mb; i++) await runtime.blobs.put(`chunk-${Math.random()}`, randomBytes(2 ** 20)); };
    await grow(18);
    watch.look();
    watch.look();
    expect(lines.map((l) => l.event)).toEqual(['wal-large']);
    expect(lines[0]!.msg).toContain(`the -wal beside ${db.path} has grown to`);
    expect(lines[0]!.msg).toContain('a sqlite3 shell inside BEGIN');
    expect(lines[0]!.walBytes).toBeGreaterThanOrEqual(warnBytes);
    // Not yet twice the size warned of: no second line.
    await grow(1);
    watch.look();
    expect(lines.map((l) => l.event)).toEqual(['wal-large']);
    await grow(18);
    watch.look();
    expect(lines.map((l) => l.event)).toEqual(['wal-large', 'wal-large']);
    expect(lines[1]!.walBytes as number).toBeGreaterThanOrEqual(2 * (lines[0]!.walBytes as number));
    reader.exec('COMMIT');
    // The first commit after the reader ends copies the whole -wal into the file; the next ones cut it back.
    for (let i = 0; i < 3; i++) await runtime.blobs.put(`small-${i}`, randomBytes(100));
    watch.look();
    expect(lines.map((l) => l.event)).toEqual(['wal-large', 'wal-large', 'wal-shrunk']);
    watch.stop();
  });

  it('looks on its own, every everyMs, and no more once stopped', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path, clock: new ManualClock() });
    opened.push(runtime);
    await runtime.blobs.put('first', randomBytes(100));
    const { log, lines } = captureLogs();
    // A threshold of 1 byte: every look past it warns once, then again at each doubling, never at the same size.
    const watch = watchWal(db.path, log, { warnBytes: 1, everyMs: 20 });
    // Without the timer no line would come: the test's timeout fails it.
    while (!lines.length) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(lines[0]).toMatchObject({ event: 'wal-large', file: db.path });
    watch.stop();
    for (let i = 0; i < 10; i++) await runtime.blobs.put(`grow-${i}`, randomBytes(2 ** 20));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(lines).toHaveLength(1);
  }, 10_000);
});
