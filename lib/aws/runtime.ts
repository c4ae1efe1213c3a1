import { InvalidInputError } from '../core/errors.ts';
import { retentionMsFromEnv } from '../core/retention.ts';
import type { Clock } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { BUCKET_NAME_ENV, KMS_KEY_ID_ENV, QUEUE_URL_ENV, RETENTION_DAYS_ENV, TABLE_NAME_ENV } from '../settings.ts';
import type { AwsResource } from './check-resources.ts';
import { createAwsClients, type AwsClientOptions, type AwsClients } from './clients.ts';
import { DynamoCheckpointStore } from './dynamo-checkpoint-store.ts';
import { DynamoLedger } from './dynamo-ledger.ts';
import { S3BlobStore } from './s3-blob-store.ts';
import { SqsRunQueue } from './sqs-run-queue.ts';
import { unnamedResource } from './unnamed-resource.ts';

export interface AwsRuntimeOptions extends AwsClientOptions {
  /** DynamoDB table (env TABLE_NAME). */
  tableName?: string;
  /** S3 bucket for large outputs and spilled values (env BUCKET_NAME). */
  bucketName?: string;
  /** SQS FIFO queue URL (env QUEUE_URL). */
  queueUrl?: string;
  /** Checkpoint history retention (env STEPWISE_RETENTION_DAYS, default 14 days). */
  retentionMs?: number;
  /** Encrypt blobs with this KMS key (env STEPWISE_KMS_KEY_ID); SSE-S3 otherwise. */
  kmsKeyId?: string;
  spillBytes?: number;
  clock?: Clock;
  /** Bring your own clients (to share them, or to instrument them). */
  clients?: AwsClients;
  /**
   * The resources that must be named (default all three). One left out and not named gets a stand-in
   * that rejects each call with what to set: the CLI's read commands need the table alone.
   */
  needs?: readonly AwsResource[];
}

export interface AwsRuntime {
  store: DynamoCheckpointStore;
  blobs: S3BlobStore;
  ledger: DynamoLedger;
  queue: SqsRunQueue;
  clients: AwsClients;
  tableName: string;
  bucketName: string;
  queueUrl: string;
  close(): void;
}

/**
 * The production backend: checkpoints and the idempotency ledger in DynamoDB, large values in S3, the run
 * queue on SQS FIFO. Options win over the environment; the Lambda handlers pass none.
 */
export function openAwsRuntime(options: AwsRuntimeOptions = {}, env: NodeJS.ProcessEnv = process.env): AwsRuntime {
  // Trimmed, as the other settings are: a name pasted with a space or a newline (a function's console, an
  // env file) was taken as it was, a queue URL then refused as 'not a FIFO queue' and a blank table name
  // sent to DynamoDB, where a blank one is not set at all and is said to be missing by its variable.
  const fromEnv = (name: string) => env[name]?.trim() || undefined;
  const tableName = options.tableName ?? fromEnv(TABLE_NAME_ENV);
  const bucketName = options.bucketName ?? fromEnv(BUCKET_NAME_ENV);
  const queueUrl = options.queueUrl ?? fromEnv(QUEUE_URL_ENV);
  const needs = options.needs ?? ['table', 'bucket', 'queue'];
  const missing = [
    !tableName && TABLE_NAME_ENV,
    !bucketName && needs.includes('bucket') && BUCKET_NAME_ENV,
    !queueUrl && needs.includes('queue') && QUEUE_URL_ENV,
  ].filter(Boolean);
  if (!tableName || missing.length > 0) {
    throw new InvalidInputError(`the AWS backend needs ${missing.join(', ')} (environment) or the matching options`);
  }
  const retentionMs = options.retentionMs ?? retentionMsFromEnv(env);
  const kmsKeyId = options.kmsKeyId ?? env[KMS_KEY_ID_ENV];
  const clock = options.clock ?? systemClock;
  const ownClients = !options.clients;
  const clients = options.clients ?? createAwsClients(options, env);

  const blobs = bucketName
    ? new S3BlobStore({ s3: clients.s3, bucket: bucketName, ...(kmsKeyId ? { kmsKeyId } : {}) })
    : unnamedResource('bucket', S3BlobStore);
  const shared = { doc: clients.doc, tableName, blobs, clock, ...(options.spillBytes !== undefined ? { spillBytes: options.spillBytes } : {}) };
  return {
    store: new DynamoCheckpointStore({ ...shared, ...(retentionMs !== undefined ? { retentionMs } : {}) }),
    blobs,
    ledger: new DynamoLedger(shared),
    queue: queueUrl ? new SqsRunQueue({ sqs: clients.sqs, queueUrl, clock }) : unnamedResource('queue', SqsRunQueue),
    clients, tableName, bucketName: bucketName ?? '', queueUrl: queueUrl ?? '',
    close: () => {
      if (ownClients) clients.destroy();
    },
  };
}
