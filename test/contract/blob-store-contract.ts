import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { blobRef } from '../../lib/core/result.ts';
import type { BlobStore } from '../../lib/ports.ts';

export interface BlobStoreSubject {
  blobs: BlobStore;
  /** Bytes the backend holds for the blob (its row's data, its object's length). */
  storedBytes(ref: string): Promise<number>;
  /** Stores the bytes as code from before compression did: as they are, with no encoding marked. */
  putAsOlderCode(ref: string, data: Buffer): Promise<void>;
}

/** A tool's output as it looks: JSON rows with varied values (no run of one repeated character). */
function queryRows(count: number): Buffer {
  const names = ['Ada Chen', 'Bruno Rossi', 'Chiara Novak', 'Dmitri Okafor', 'Elif Weber', 'Farah Tanaka', 'Goran Moreau'];
  const rows = Array.from({ length: count }, (_, i) => ({
    id: 50_000 + i * 7, customer: names[(i * 5) % names.length], total_cents: (i * 7919) % 100_003,
    created_at: new Date(Date.UTC(2025, i % 12, 1 + (i % 28), i % 24, (i * 13) % 60)).toISOString(), status: ['paid', 'pending', 'refunded'][i % 3],
  }));
  return Buffer.from(JSON.stringify(rows));
}

/** The blob store contract, run on SQLite and on S3 (fauxqs). */
export function blobStoreContract(name: string, subject: () => BlobStoreSubject): void {
  describe(`BlobStore contract: ${name}`, () => {
    it('keeps a compressible output compressed and gives back its exact bytes', async () => {
      const { blobs, storedBytes } = subject();
      const data = queryRows(200);
      expect(data.length).toBeGreaterThan(20_000);
      const ref = blobRef(data);
      await blobs.put(ref, data);
      await blobs.put(ref, data); // a retried step puts the same content again
      expect(await blobs.get(ref)).toEqual(data);
      expect(await storedBytes(ref)).toBeLessThan(data.length / 3);
    });

    it('keeps bytes that do not compress as they are, never larger', async () => {
      const { blobs, storedBytes } = subject();
      const data = randomBytes(8_192);
      const ref = blobRef(data);
      await blobs.put(ref, data);
      expect(await blobs.get(ref)).toEqual(data);
      expect(await storedBytes(ref)).toBe(data.length);
    });

    it('reads blobs stored uncompressed by older code, even bytes that look compressed', async () => {
      const { blobs, putAsOlderCode } = subject();
      const text = Buffer.from(`older output ${randomBytes(4).toString('hex')} `.repeat(400));
      // Gzip's own bytes, stored as a blob: only an out-of-band marker can tell them from a compressed blob.
      const gzipped = gzipSync(Buffer.from(`a gzip file as a tool output ${randomBytes(4).toString('hex')}`.repeat(300)));
      expect(gzipped.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
      for (const data of [text, gzipped]) {
        await putAsOlderCode(blobRef(data), data);
        expect(await blobs.get(blobRef(data))).toEqual(data);
      }
    });

    it('keeps an empty blob', async () => {
      const { blobs } = subject();
      const data = Buffer.alloc(0);
      await blobs.put(blobRef(data), data);
      expect(await blobs.get(blobRef(data))).toEqual(data);
    });
  });
}
