import { compressBlob, decompressBlob } from '../blob-compression.ts';
import { BLOB_GRACE_MS } from '../core/retention.ts';
import type { BlobStore, Clock } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { immediate, preparedOnce, type Db, type Prepare } from './database.ts';

/** Unreferenced blobs one transaction of the sweep deletes at most. */
export const BLOB_BATCH = 500;

/** A blob as its row holds it: compressed when that saves space (lib/blob-compression.ts). */
export interface EncodedBlob { ref: string; bytes: number; body: Buffer; encoding?: string }

/** Encoded before the write's transaction, so compressing holds no lock. */
export function encodeBlob(ref: string, data: Buffer): EncodedBlob {
  return { ref, bytes: data.length, ...compressBlob(data) };
}

const INSERT_BLOB = 'INSERT INTO blobs (ref, bytes, data, encoding, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (ref) DO UPDATE SET created_at = excluded.created_at';

/** One blob written: by SqliteBlobStore.put, or inside a checkpoint's transaction (CheckpointWrite.blobs). */
export function writeBlob(sql: Prepare, blob: EncodedBlob, now: number): void {
  sql(INSERT_BLOB).run(blob.ref, blob.bytes, blob.body, blob.encoding ?? null, now);
}

/**
 * Large tool outputs in the same SQLite file, compressed when that saves space. Refs are content hashes
 * of the output itself, so a repeated put writes nothing new; it does renew the blob's time, which is
 * what the sweep's grace period counts from.
 */
export class SqliteBlobStore implements BlobStore {
  constructor(private readonly db: Db, private readonly clock: Clock = systemClock) {}

  async put(ref: string, data: Buffer): Promise<void> {
    writeBlob(preparedOnce(this.db), encodeBlob(ref, data), this.clock.now());
  }

  /**
   * Mark and sweep: deletes blobs no step record refers to (only step records hold refs, in checkpoint rows
   * and in the steps table) that were last put more than `graceMs` ago. A blob put since then may belong to
   * a step whose checkpoint is not written yet. Returns blobs removed.
   *
   * The mark is a read, which takes no lock: as one statement with the delete it held the write lock, and
   * every worker's step with it, while it read every record of the file. The sweep goes in batches of
   * `batch` (BLOB_BATCH), each its own transaction, and deletes a blob only if it is still that old: a
   * record written since the mark that refers to it was written with a put of it, which renewed its time.
   * `onBatch` is told each batch once it has committed.
   */
  collect(graceMs: number = BLOB_GRACE_MS, options: { batch?: number; onBatch?: (deleted: number) => void } = {}): number {
    const sql = preparedOnce(this.db);
    const before = this.clock.now() - graceMs;
    const unreferenced = (sql(
      `SELECT ref FROM blobs WHERE created_at < ? AND ref NOT IN (
         SELECT json_extract(record, '$.result.ref') FROM steps WHERE record IS NOT NULL AND json_extract(record, '$.result.ref') IS NOT NULL
         UNION ALL SELECT json_extract(record, '$.result.ref') FROM checkpoints WHERE record IS NOT NULL AND json_extract(record, '$.result.ref') IS NOT NULL)
       ORDER BY ref`,
    ).all(before) as { ref: string }[]).map((r) => r.ref);
    const batch = options.batch ?? BLOB_BATCH;
    let total = 0;
    for (let at = 0; at < unreferenced.length; at += batch) {
      const refs = JSON.stringify(unreferenced.slice(at, at + batch));
      const deleted = immediate(this.db, () => sql('DELETE FROM blobs WHERE ref IN (SELECT value FROM json_each(?)) AND created_at < ?').run(refs, before).changes);
      total += deleted;
      options.onBatch?.(deleted);
    }
    return total;
  }

  async get(ref: string): Promise<Buffer | undefined> {
    const row = preparedOnce(this.db)('SELECT data, encoding FROM blobs WHERE ref = ?').get(ref) as { data: Buffer; encoding: string | null } | undefined;
    return row && decompressBlob(row.data, row.encoding, ref);
  }
}
