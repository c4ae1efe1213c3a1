import { DeleteObjectCommand, HeadObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { ScanCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { BLOB_GRACE_MS } from '../core/retention.ts';
import type { BlobStore } from '../ports.ts';
import { REF_SUFFIX } from './attribute-spill.ts';
import { errorName } from './dynamo-errors.ts';

export interface BlobSweepOptions {
  doc: DynamoDBDocumentClient;
  s3: S3Client;
  tableName: string;
  bucketName: string;
  /** Reads spilled step records, whose output refs are inside them. */
  blobs: BlobStore;
  /** The S3BlobStore's key prefix. */
  prefix?: string;
  /** Objects last written less than this long ago are kept whatever refers to them. */
  graceMs?: number;
  /** S3's clock, against which an object's LastModified is judged (default: this machine's). */
  now?: number;
}

export interface BlobSweep {
  /** Distinct refs found in the table. */
  referenced: number;
  deleted: number;
  /** Unreferenced objects kept because they are younger than the grace period. */
  young: number;
}

const REF = /^sha256:[0-9a-f]{64}$/;
const KEY = /sha256-([0-9a-f]{64})$/;

/**
 * Mark and sweep of the bucket's blobs. An S3 lifecycle rule cannot know which blobs a checkpoint still
 * refers to, so this reads the whole table: every `...Ref` attribute (spilled heads, decisions, records,
 * ledger results, event payloads) and the output ref inside every step record (spilled ones fetched) marks
 * a blob; an unmarked object older than the grace period is deleted. Safe against concurrent writers: a
 * blob is always written before the item that refers to it, and a repeated put of the same content
 * rewrites the object, renewing its LastModified, so a blob a step is about to refer to is young; each
 * candidate's LastModified is read again right before its delete. Run it now and then (a daily schedule,
 * `stepwise prune --backend aws`): it scans the table, so it costs one read unit per 4 KB of table.
 */
export async function sweepBlobs(options: BlobSweepOptions): Promise<BlobSweep> {
  const referenced = new Set<string>();
  let start: Record<string, unknown> | undefined;
  do {
    const page = await options.doc.send(new ScanCommand({
      TableName: options.tableName, ConsistentRead: true, ...(start ? { ExclusiveStartKey: start } : {}),
    }));
    for (const item of page.Items ?? []) await mark(item, referenced, options.blobs);
    start = page.LastEvaluatedKey;
  } while (start);

  const cutoff = (options.now ?? Date.now()) - (options.graceMs ?? BLOB_GRACE_MS);
  const prefix = options.prefix ?? 'blobs/';
  const result: BlobSweep = { referenced: referenced.size, deleted: 0, young: 0 };
  let token: string | undefined;
  do {
    const page = await options.s3.send(new ListObjectsV2Command({ Bucket: options.bucketName, Prefix: prefix, ...(token ? { ContinuationToken: token } : {}) }));
    for (const object of page.Contents ?? []) {
      const hex = KEY.exec(object.Key ?? '')?.[1];
      if (!hex || referenced.has(`sha256:${hex}`)) continue;
      if (!(object.LastModified && object.LastModified.getTime() < cutoff) || !(await stillOld(options, object.Key!, cutoff))) {
        result.young++;
        continue;
      }
      await options.s3.send(new DeleteObjectCommand({ Bucket: options.bucketName, Key: object.Key! }));
      result.deleted++;
    }
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return result;
}

async function mark(item: Record<string, unknown>, referenced: Set<string>, blobs: BlobStore): Promise<void> {
  for (const [name, value] of Object.entries(item)) {
    if (name.endsWith(REF_SUFFIX) && typeof value === 'string' && REF.test(value)) referenced.add(value);
  }
  // A step record's output ref is inside the record, which may itself be spilled.
  let record = typeof item.record === 'string' ? item.record : undefined;
  if (record === undefined && typeof item[`record${REF_SUFFIX}`] === 'string') record = (await blobs.get(item[`record${REF_SUFFIX}`] as string))?.toString('utf8');
  if (record === undefined) return;
  try {
    const ref = (JSON.parse(record) as { result?: { ref?: unknown } }).result?.ref;
    if (typeof ref === 'string' && REF.test(ref)) referenced.add(ref);
  } catch {
    // Not JSON: an unreadable record refers to nothing this sweep can know; it keeps nothing either.
  }
}

/** The object's LastModified, read again: a put since the listing (the same content written again) keeps it. */
async function stillOld(options: BlobSweepOptions, key: string, cutoff: number): Promise<boolean> {
  try {
    const head = await options.s3.send(new HeadObjectCommand({ Bucket: options.bucketName, Key: key }));
    return (head.LastModified?.getTime() ?? Number.POSITIVE_INFINITY) < cutoff;
  } catch (error) {
    if (errorName(error) === 'NotFound' || errorName(error) === 'NoSuchKey') return false;
    throw error;
  }
}
