import {
  CreateTableCommand, DescribeTableCommand, DescribeTimeToLiveCommand, UpdateTableCommand, UpdateTimeToLiveCommand,
  waitUntilTableExists, type DynamoDBClient, type TableDescription,
} from '@aws-sdk/client-dynamodb';
import {
  CreateBucketCommand, PutBucketEncryptionCommand, PutPublicAccessBlockCommand, type BucketLocationConstraint, type S3Client,
} from '@aws-sdk/client-s3';
import {
  CreateQueueCommand, GetQueueAttributesCommand, GetQueueUrlCommand, SetQueueAttributesCommand, type SQSClient,
} from '@aws-sdk/client-sqs';
import { InvalidInputError } from '../core/errors.ts';
import { DEFAULT_MAX_RECEIVES } from '../engine/handle-message.ts';
import { errorName } from './dynamo-errors.ts';
import {
  PK, SK, STATUS_INDEX, STATUS_INDEX_ATTRIBUTES, STATUS_KEY, STATUS_SORT, TTL_ATTRIBUTE,
  WAIT_DEADLINE, WAIT_INDEX, WAIT_INDEX_ATTRIBUTES, WAIT_SHARD, notStepwiseTable,
} from './table-layout.ts';

/**
 * Creates the table, queue and bucket the AWS runtime needs, for local servers, tests and
 * `stepwise init --backend aws`. Each is idempotent: an existing resource is brought up to date, not
 * replaced. In a deployment the CDK stack creates the same shapes.
 */

export async function ensureTable(dynamo: DynamoDBClient, tableName: string): Promise<void> {
  try {
    await dynamo.send(new CreateTableCommand({
      TableName: tableName,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [
        { AttributeName: PK, AttributeType: 'S' },
        { AttributeName: SK, AttributeType: 'S' },
        { AttributeName: STATUS_KEY, AttributeType: 'S' },
        { AttributeName: STATUS_SORT, AttributeType: 'N' },
        { AttributeName: WAIT_SHARD, AttributeType: 'S' },
        { AttributeName: WAIT_DEADLINE, AttributeType: 'N' },
      ],
      KeySchema: [{ AttributeName: PK, KeyType: 'HASH' }, { AttributeName: SK, KeyType: 'RANGE' }],
      GlobalSecondaryIndexes: [{
        IndexName: STATUS_INDEX,
        KeySchema: [{ AttributeName: STATUS_KEY, KeyType: 'HASH' }, { AttributeName: STATUS_SORT, KeyType: 'RANGE' }],
        // Only what a listing shows: the index is written on every step, so it must stay small.
        Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: STATUS_INDEX_ATTRIBUTES },
      }, WAIT_INDEX_DEFINITION],
    }));
  } catch (error) {
    if (errorName(error) !== 'ResourceInUseException') throw error;
  }
  await waitUntilTableExists({ client: dynamo, maxWaitTime: 300, minDelay: 1, maxDelay: 5 }, { TableName: tableName });
  const table = (await dynamo.send(new DescribeTableCommand({ TableName: tableName }))).Table;
  assertStepwiseLayout(tableName, table);
  await addWaitIndex(dynamo, tableName, table);
  const ttl = await dynamo.send(new DescribeTimeToLiveCommand({ TableName: tableName }));
  const status = ttl.TimeToLiveDescription?.TimeToLiveStatus;
  if (status !== 'ENABLED' && status !== 'ENABLING') {
    await dynamo.send(new UpdateTimeToLiveCommand({
      TableName: tableName, TimeToLiveSpecification: { AttributeName: TTL_ATTRIBUTE, Enabled: true },
    }));
  }
}

const WAIT_INDEX_DEFINITION = {
  IndexName: WAIT_INDEX,
  KeySchema: [{ AttributeName: WAIT_SHARD, KeyType: 'HASH' as const }, { AttributeName: WAIT_DEADLINE, KeyType: 'RANGE' as const }],
  Projection: { ProjectionType: 'INCLUDE' as const, NonKeyAttributes: WAIT_INDEX_ATTRIBUTES },
};

/**
 * A name taken by another application's table is refused before anything is changed: bringing it "up to
 * date" would add our index to it and turn TTL on `expiresAt` on, deleting its items that carry one.
 */
function assertStepwiseLayout(tableName: string, table: TableDescription | undefined): void {
  const foreign = notStepwiseTable(tableName, table);
  if (foreign) throw new InvalidInputError(`${foreign}: choose another name; it was left unchanged`);
}

/** A table made before waits existed gets the deadline index added, not recreated. */
async function addWaitIndex(dynamo: DynamoDBClient, tableName: string, table: TableDescription | undefined): Promise<void> {
  if (table?.GlobalSecondaryIndexes?.some((index) => index.IndexName === WAIT_INDEX)) return;
  await dynamo.send(new UpdateTableCommand({
    TableName: tableName,
    AttributeDefinitions: [{ AttributeName: WAIT_SHARD, AttributeType: 'S' }, { AttributeName: WAIT_DEADLINE, AttributeType: 'N' }],
    GlobalSecondaryIndexUpdates: [{ Create: WAIT_INDEX_DEFINITION }],
  }));
}

export interface QueueOptions {
  /** Must exceed the worker's longest step (AWS advises 6x the Lambda timeout). */
  visibilityTimeoutSeconds?: number;
  /**
   * Receives before SQS moves a message to the dead-letter queue. Above the engine's own limit
   * (DEFAULT_MAX_RECEIVES), so the engine first fails a run whose step keeps crashing, with a reason.
   */
  maxReceiveCount?: number;
}

/** A FIFO queue with a FIFO dead-letter queue beside it; `name` gets `.fifo` appended if missing. */
export async function ensureQueue(sqs: SQSClient, name: string, options: QueueOptions = {}): Promise<{ queueUrl: string; dlqUrl: string }> {
  const base = name.replace(/\.fifo$/, '');
  const dlqUrl = await createOrUpdateQueue(sqs, `${base}-dlq.fifo`, {
    FifoQueue: 'true', MessageRetentionPeriod: String(14 * 24 * 3600),
  });
  const dlqArn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlqUrl, AttributeNames: ['QueueArn'] }))).Attributes?.QueueArn;
  if (!dlqArn) throw new Error(`no ARN for queue ${dlqUrl}`);
  const queueUrl = await createOrUpdateQueue(sqs, `${base}.fifo`, {
    FifoQueue: 'true',
    // High-throughput FIFO: deduplication and throughput are per message group (= per run).
    DeduplicationScope: 'messageGroup',
    FifoThroughputLimit: 'perMessageGroupId',
    ContentBasedDeduplication: 'false',
    VisibilityTimeout: String(options.visibilityTimeoutSeconds ?? 60),
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: options.maxReceiveCount ?? DEFAULT_MAX_RECEIVES + 5 }),
  });
  return { queueUrl, dlqUrl };
}

async function createOrUpdateQueue(sqs: SQSClient, name: string, attributes: Record<string, string>): Promise<string> {
  try {
    const created = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
    return created.QueueUrl!;
  } catch (error) {
    // Exists with other attributes: update the ones SQS allows to change (FifoQueue cannot).
    if (!errorName(error).includes('QueueNameExists') && !errorName(error).includes('QueueAlreadyExists')) throw error;
    const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: name }));
    const current: Record<string, string | undefined> = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['All'] }))).Attributes ?? {};
    const { FifoQueue: _fifo, ...changeable } = attributes;
    const changed = Object.fromEntries(Object.entries(changeable).filter(([key, value]) => current[key] !== value));
    if (Object.keys(changed).length) await sqs.send(new SetQueueAttributesCommand({ QueueUrl, Attributes: changed }));
    return QueueUrl!;
  }
}

/** A private bucket, encrypted by default (SSE-S3, or SSE-KMS with the given key). */
export async function ensureBucket(s3: S3Client, bucket: string, options: { kmsKeyId?: string } = {}): Promise<void> {
  const region = await s3.config.region();
  try {
    await s3.send(new CreateBucketCommand({
      Bucket: bucket,
      ...(region && region !== 'us-east-1' ? { CreateBucketConfiguration: { LocationConstraint: region as BucketLocationConstraint } } : {}),
    }));
  } catch (error) {
    if (errorName(error) !== 'BucketAlreadyOwnedByYou') throw error;
  }
  await s3.send(new PutPublicAccessBlockCommand({
    Bucket: bucket,
    PublicAccessBlockConfiguration: { BlockPublicAcls: true, IgnorePublicAcls: true, BlockPublicPolicy: true, RestrictPublicBuckets: true },
  }));
  await s3.send(new PutBucketEncryptionCommand({
    Bucket: bucket,
    ServerSideEncryptionConfiguration: {
      Rules: [{
        ApplyServerSideEncryptionByDefault: options.kmsKeyId
          ? { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: options.kmsKeyId }
          : { SSEAlgorithm: 'AES256' },
        BucketKeyEnabled: true,
      }],
    },
  }));
}
