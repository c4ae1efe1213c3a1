import { createHash } from 'node:crypto';
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { BlobStore } from '../ports.ts';
import { compressBlob, decompressBlob } from '../blob-compression.ts';
import { BlobRefusedError, DamagedBlobError, errorMessage } from '../core/errors.ts';
import { foldedExcerpt } from '../core/prompt.ts';
import { errorName } from './dynamo-errors.ts';

const REF = /^sha256:([0-9a-f]{64})$/;
/** The object's metadata key that marks its body compressed (objects without it are as given). */
const ENCODING_META = 'stepwise-encoding';

export interface S3BlobStoreOptions {
  s3: S3Client;
  bucket: string;
  /** Key prefix for blobs; the content hash follows it. */
  prefix?: string;
  /**
   * Encrypt with this KMS key (SSE-KMS); without one, by the bucket's default encryption (S3 encrypts every
   * object, SSE-S3 at least). Named as AES256, an upload overrode a bucket whose default is AWS-managed KMS.
   */
  kmsKeyId?: string;
}

/**
 * Large tool outputs and spilled attribute values in S3, gzipped when that saves space. Keys are content
 * hashes of the data itself, so a repeated put (a retried step, crash point C5) writes the same object
 * again and nothing can be overwritten with other bytes. Every put carries the SHA-256 of the body it
 * sends as its checksum, which S3 verifies on arrival; every get re-hashes the data it gives back.
 */
export class S3BlobStore implements BlobStore {
  constructor(private readonly options: S3BlobStoreOptions) {}

  key(ref: string): string {
    return `${this.options.prefix ?? 'blobs/'}sha256-${hexOf(ref)}`;
  }

  async put(ref: string, data: Buffer, what = "the step's output"): Promise<void> {
    const digest = createHash('sha256').update(data).digest();
    if (digest.toString('hex') !== hexOf(ref)) throw new Error(`blob ref ${ref} is not the SHA-256 of its ${data.length} bytes`);
    const { body, encoding } = compressBlob(data);
    try {
      await this.send(ref, body, encoding);
    } catch (error) {
      if (!isRefusal(error)) throw error;
      const sizes = body.length === data.length ? `${data.length} bytes` : `${data.length} bytes, ${body.length} gzipped`;
      throw new BlobRefusedError(`S3 refused to store ${what} (${sizes}) in bucket ${this.options.bucket}: ${errorName(error)}: ${foldedExcerpt(errorMessage(error), 300)}`, { cause: error });
    }
  }

  private async send(ref: string, body: Buffer, encoding: string | undefined): Promise<void> {
    await this.options.s3.send(new PutObjectCommand({
      Bucket: this.options.bucket, Key: this.key(ref), Body: body, ContentLength: body.length,
      ContentType: 'application/octet-stream',
      // User metadata, not Content-Encoding: no HTTP client in between may undo it on the way back.
      ...(encoding ? { Metadata: { [ENCODING_META]: encoding } } : {}),
      ChecksumSHA256: createHash('sha256').update(body).digest('base64'),
      ...(this.options.kmsKeyId ? { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: this.options.kmsKeyId, BucketKeyEnabled: true } : {}),
    }));
  }

  async get(ref: string): Promise<Buffer | undefined> {
    let body: Uint8Array;
    let encoding: string | undefined;
    try {
      const object = await this.options.s3.send(new GetObjectCommand({ Bucket: this.options.bucket, Key: this.key(ref) }));
      body = await object.Body!.transformToByteArray();
      encoding = object.Metadata?.[ENCODING_META];
    } catch (error) {
      if (errorName(error) === 'NoSuchKey') return undefined;
      throw error;
    }
    let data: Buffer;
    try {
      data = decompressBlob(Buffer.from(body), encoding, ref);
    } catch (error) {
      // An encoding this code does not know is newer code's blob, not a damaged one: left for that code.
      if (isNewerEncoding(encoding)) throw error;
      // A gzip body cut short or replaced: read again, it is the same bytes, so no retry mends it.
      throw new DamagedBlobError(ref, `its ${body.length} bytes do not decompress (${errorMessage(error)}): the object was replaced or cut short`, { cause: error });
    }
    if (createHash('sha256').update(data).digest('hex') !== hexOf(ref)) {
      throw new DamagedBlobError(ref, `its ${data.length} bytes came back with other content (the object was replaced or cut short)`);
    }
    return data;
  }
}

/** Throttles and timeouts S3 answers with a 4xx too; they pass, so they are not refusals. */
const PASSING = new Set(['RequestTimeout', 'SlowDown', 'Throttling', 'ThrottlingException', 'TooManyRequestsException', 'RequestLimitExceeded']);

/**
 * S3 answered and refused (a 4xx the SDK does not retry): the same put would be refused again. Anything
 * else (5xx, no answer at all) may pass on a later try.
 */
function isRefusal(error: unknown): boolean {
  const e = error as { $fault?: string; $retryable?: unknown; $metadata?: { httpStatusCode?: number } };
  const status = e?.$metadata?.httpStatusCode;
  return e?.$fault === 'client' && !e.$retryable && status !== 408 && status !== 429 && !PASSING.has(errorName(error));
}

function isNewerEncoding(encoding: string | undefined): boolean {
  return encoding !== undefined && encoding !== 'gzip';
}

function hexOf(ref: string): string {
  const match = REF.exec(ref);
  if (!match) throw new Error(`not a content-addressed blob ref: ${ref}`);
  return match[1]!;
}
