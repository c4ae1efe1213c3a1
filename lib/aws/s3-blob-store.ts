import { createHash } from 'node:crypto';
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { BlobStore } from '../ports.ts';
import { errorName } from './dynamo-errors.ts';

const REF = /^sha256:([0-9a-f]{64})$/;

export interface S3BlobStoreOptions {
  s3: S3Client;
  bucket: string;
  /** Key prefix for blobs; the content hash follows it. */
  prefix?: string;
  /** Encrypt with this KMS key (SSE-KMS); without one, S3-managed keys (SSE-S3, AES256). */
  kmsKeyId?: string;
}

/**
 * Large tool outputs and spilled attribute values in S3. Keys are content hashes, so a repeated put (a
 * retried step, crash point C5) writes the same object again and nothing can be overwritten with other
 * bytes. Every put carries the SHA-256 as its checksum, which S3 verifies on arrival; every get re-hashes
 * what came back.
 */
export class S3BlobStore implements BlobStore {
  constructor(private readonly options: S3BlobStoreOptions) {}

  key(ref: string): string {
    return `${this.options.prefix ?? 'blobs/'}sha256-${hexOf(ref)}`;
  }

  async put(ref: string, data: Buffer): Promise<void> {
    const digest = createHash('sha256').update(data).digest();
    if (digest.toString('hex') !== hexOf(ref)) throw new Error(`blob ref ${ref} is not the SHA-256 of its ${data.length} bytes`);
    await this.options.s3.send(new PutObjectCommand({
      Bucket: this.options.bucket, Key: this.key(ref), Body: data, ContentLength: data.length,
      ContentType: 'application/octet-stream',
      ChecksumSHA256: digest.toString('base64'),
      ...(this.options.kmsKeyId
        ? { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: this.options.kmsKeyId, BucketKeyEnabled: true }
        : { ServerSideEncryption: 'AES256' }),
    }));
  }

  async get(ref: string): Promise<Buffer | undefined> {
    let body: Uint8Array;
    try {
      const object = await this.options.s3.send(new GetObjectCommand({ Bucket: this.options.bucket, Key: this.key(ref) }));
      body = await object.Body!.transformToByteArray();
    } catch (error) {
      if (errorName(error) === 'NoSuchKey') return undefined;
      throw error;
    }
    const data = Buffer.from(body);
    if (createHash('sha256').update(data).digest('hex') !== hexOf(ref)) throw new Error(`blob ${ref} came back with other content`);
    return data;
  }
}

function hexOf(ref: string): string {
  const match = REF.exec(ref);
  if (!match) throw new Error(`not a content-addressed blob ref: ${ref}`);
  return match[1]!;
}
