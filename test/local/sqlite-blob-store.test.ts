import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { blobStoreContract } from '../contract/blob-store-contract.ts';

const dir = mkdtempSync(join(tmpdir(), 'stepwise-blobs-'));
const runtime = openLocalRuntime({ dbPath: join(dir, 'blobs.db') });
afterAll(() => { runtime.close(); rmSync(dir, { recursive: true, force: true }); });

blobStoreContract('SQLite', () => ({
  blobs: runtime.blobs,
  storedBytes: async (ref) => (runtime.db.prepare('SELECT length(data) AS n FROM blobs WHERE ref = ?').get(ref) as { n: number }).n,
  // The row as code before compression wrote it: no encoding column in its statement.
  putAsOlderCode: async (ref, data) => {
    runtime.db.prepare('INSERT INTO blobs (ref, bytes, data, created_at) VALUES (?, ?, ?, ?)').run(ref, data.length, data, Date.now());
  },
}));

describe('SQLite blob store, the encoding mark', () => {
  it('marks a compressed blob gzip in its row, and refuses a mark it does not know without touching the row', async () => {
    const data = Buffer.from('{"id":1,"name":"row"}\n'.repeat(500));
    await runtime.blobs.put('marked', data);
    expect(runtime.db.prepare("SELECT encoding, bytes FROM blobs WHERE ref = 'marked'").get()).toEqual({ encoding: 'gzip', bytes: data.length });
    // A mark written by newer code (another algorithm): a clear error naming the blob, and the row stays.
    runtime.db.prepare("UPDATE blobs SET encoding = 'zstd' WHERE ref = 'marked'").run();
    await expect(runtime.blobs.get('marked')).rejects.toThrow(/blob marked: unknown encoding zstd \(written by newer code\)/);
    expect(runtime.db.prepare("SELECT encoding FROM blobs WHERE ref = 'marked'").get()).toEqual({ encoding: 'zstd' });
  });
});
