import type { BlobStore, Clock } from '../ports.ts';
import { systemClock } from '../ports.ts';
import type { Db } from './database.ts';

/** Large tool outputs in the same SQLite file. Refs are content hashes, so a repeated put is a no-op. */
export class SqliteBlobStore implements BlobStore {
  constructor(private readonly db: Db, private readonly clock: Clock = systemClock) {}

  async put(ref: string, data: Buffer): Promise<void> {
    this.db.prepare('INSERT OR IGNORE INTO blobs (ref, bytes, data, created_at) VALUES (?, ?, ?, ?)').run(ref, data.length, data, this.clock.now());
  }

  async get(ref: string): Promise<Buffer | undefined> {
    const row = this.db.prepare('SELECT data FROM blobs WHERE ref = ?').get(ref) as { data: Buffer } | undefined;
    return row?.data;
  }
}
