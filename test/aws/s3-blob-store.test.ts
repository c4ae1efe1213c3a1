import { createHash } from 'node:crypto';
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3BlobStore } from '../../lib/aws/s3-blob-store.ts';
import { ensureBucket } from '../../lib/aws/provision.ts';
import { blobRef } from '../../lib/core/result.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';
import { blobStoreContract } from '../contract/blob-store-contract.ts';

let resources: TestResources;

/** Sees each command's input as the code under test built it. */
function capture(stack: { add(middleware: unknown, options: unknown): void }, name: string, see: (input: Record<string, unknown>) => void): void {
  stack.add(
    (next: (args: { input: Record<string, unknown> }) => Promise<unknown>) => async (args: { input: Record<string, unknown> }) => {
      see(args.input);
      return next(args);
    },
    { step: 'initialize', name },
  );
}
beforeAll(async () => { resources = await createTestResources('blobs'); });
afterAll(() => resources?.close());

blobStoreContract('S3 (fauxqs)', () => {
  const blobs = resources.runtime().blobs;
  return {
    blobs,
    storedBytes: async (ref) => (await resources.clients.s3.send(new HeadObjectCommand({ Bucket: resources.bucketName, Key: blobs.key(ref) }))).ContentLength!,
    // The object as code before compression wrote it: the bytes as they are, no encoding in its metadata.
    putAsOlderCode: async (ref, data) => {
      await resources.clients.s3.send(new PutObjectCommand({ Bucket: resources.bucketName, Key: blobs.key(ref), Body: data, ContentLength: data.length }));
    },
  };
});

describe('S3 blob store', () => {
  it('stores content under its SHA-256, encrypted, gzipped, with the hash of the body sent as the checksum S3 verifies', async () => {
    const sent: Record<string, unknown>[] = [];
    capture(resources.clients.s3.middlewareStack, 'capture-put', (input) => sent.push(input));
    const blobs = resources.runtime().blobs;
    const data = Buffer.from('a large tool output '.repeat(1000));
    const ref = blobRef(data);
    await blobs.put(ref, data);
    await blobs.put(ref, data); // a retried step uploads the same bytes to the same key: harmless
    const hex = createHash('sha256').update(data).digest('hex');
    const put = sent.find((input) => input.Body)!;
    const body = put.Body as Buffer;
    expect(body.length).toBeLessThan(data.length / 10);
    expect(put).toMatchObject({
      Key: `blobs/sha256-${hex}`, Metadata: { 'stepwise-encoding': 'gzip' },
      ChecksumSHA256: createHash('sha256').update(body).digest('base64'),
    });
    // No key given: the bucket's default encryption applies, where AES256 named on the upload overrode a
    // bucket whose default is AWS-managed KMS.
    expect(put.ServerSideEncryption).toBeUndefined();
    expect(await blobs.get(ref)).toEqual(data);
    resources.clients.s3.middlewareStack.remove('capture-put');
  });

  it('uses SSE-KMS when given a key', async () => {
    const blobs = new S3BlobStore({ s3: resources.clients.s3, bucket: resources.bucketName, kmsKeyId: 'alias/stepwise' });
    let input: Record<string, unknown> | undefined;
    capture(resources.clients.s3.middlewareStack, 'capture-kms', (sent) => { input = sent; });
    const data = Buffer.from('kms');
    await blobs.put(blobRef(data), data);
    resources.clients.s3.middlewareStack.remove('capture-kms');
    expect(input).toMatchObject({ ServerSideEncryption: 'aws:kms', SSEKMSKeyId: 'alias/stepwise', BucketKeyEnabled: true });
  });

  it('returns undefined for a blob it never stored', async () => {
    expect(await resources.runtime().blobs.get(blobRef(Buffer.from('nothing')))).toBeUndefined();
  });

  it('refuses a ref that is not the hash of the bytes, and content that changed in the bucket', async () => {
    const blobs = resources.runtime().blobs;
    await expect(blobs.put(blobRef(Buffer.from('one')), Buffer.from('two'))).rejects.toThrow(/not the SHA-256/);
    const data = Buffer.from('original');
    const ref = blobRef(data);
    await blobs.put(ref, data);
    await resources.clients.s3.send(new PutObjectCommand({ Bucket: resources.bucketName, Key: blobs.key(ref), Body: Buffer.from('tampered') }));
    await expect(blobs.get(ref)).rejects.toThrow(/other content/);
    const raw = await resources.clients.s3.send(new GetObjectCommand({ Bucket: resources.bucketName, Key: blobs.key(ref) }));
    expect(await raw.Body!.transformToString()).toBe('tampered');
  });

  it('ensureBucket is idempotent', async () => {
    await ensureBucket(resources.clients.s3, resources.bucketName);
    await ensureBucket(resources.clients.s3, resources.bucketName);
  });
});
