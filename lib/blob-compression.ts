import { gunzipSync, gzipSync } from 'node:zlib';

/** How a stored blob's bytes are encoded; blobs stored without a mark (older code) are as given. */
export type BlobEncoding = 'gzip';

/**
 * gzip at its default level: JSON rows of a query result shrink 4-5x for about 0.2 ms per 20 KB, the same
 * as brotli at quality 4 and faster (measured on bench/query-output.ts). Kept only when it is smaller.
 */
export function compressBlob(data: Buffer): { body: Buffer; encoding?: BlobEncoding } {
  if (data.length === 0) return { body: data };
  const body = gzipSync(data);
  return body.length < data.length ? { body, encoding: 'gzip' } : { body: data };
}

/** The blob's own bytes from what was stored and its mark; a mark this code does not know is an error. */
export function decompressBlob(body: Buffer, encoding: string | null | undefined, ref: string): Buffer {
  if (encoding === undefined || encoding === null || encoding === '') return body;
  if (encoding === 'gzip') return gunzipSync(body);
  throw new Error(`blob ${ref} is stored with encoding "${encoding}", which this version of stepwise cannot read: it was written by newer code`);
}
