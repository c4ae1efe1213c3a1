import { gunzipSync, gzipSync } from 'node:zlib';

/** How a stored blob's bytes are encoded; blobs stored without a mark (older code) are as given. */
export type BlobEncoding = 'gzip';

/**
 * gzip at level 3, a fast one: JSON rows of a query result (bench/query-output.ts) shrink 4.2x at 20 KB and
 * 5x at 200 KB, at about half the time of the default level 6 (which gains 10% more), and as fast as
 * brotli's quality 1 with a better ratio. Kept only when it is smaller than the data.
 */
const LEVEL = 3;

export function compressBlob(data: Buffer): { body: Buffer; encoding?: BlobEncoding } {
  if (data.length === 0) return { body: data };
  const body = gzipSync(data, { level: LEVEL });
  return body.length < data.length ? { body, encoding: 'gzip' } : { body: data };
}

/** The blob's own bytes from what was stored and its mark; a mark this code does not know is an error. */
export function decompressBlob(body: Buffer, encoding: string | null | undefined, ref: string): Buffer {
  if (!encoding) return body;
  if (encoding === 'gzip') return gunzipSync(body);
  throw new Error(`blob ${ref}: unknown encoding ${encoding} (written by newer code)`);
}
