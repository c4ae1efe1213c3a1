import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
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
