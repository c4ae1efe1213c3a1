import { InvalidInputError } from '../../core/errors.ts';
import { backendKind, dbPath, type CliOptions } from '../backend.ts';

export interface InitOptions extends CliOptions {
  /** The FIFO queue's name (`.fifo` is added); its dead-letter queue is `<name>-dlq.fifo`. */
  queueName?: string;
  json?: boolean;
}

const DEFAULT_NAME = 'stepwise';
const QUEUE_NAME = /^[A-Za-z0-9_-]{1,71}$/;
const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/;
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * `init`: makes what the backend needs. On AWS, without CDK (the local servers, a sandbox account): the
 * table, the bucket and the FIFO queue with its dead-letter queue, the same shapes the construct deploys,
 * each brought up to date if it exists (lib/aws/provision.ts); prints the names and the flags that use
 * them. Locally: the database file.
 */
export async function initCommand(options: InitOptions, out: (line: string) => void): Promise<number> {
  if (options.stack) throw new InvalidInputError('`stepwise init` makes resources for use without a stack; a deployed stack has its own (use --stack with the other commands)');
  if (backendKind(options) === 'local') {
    const path = dbPath(options);
    const { openLocalRuntime } = await import('../../local/runtime.ts');
    openLocalRuntime({ dbPath: path }).close();
    out(options.json ? JSON.stringify({ dbPath: path }) : `database ${path} ready`);
    return 0;
  }
  const tableName = options.table ?? (process.env.TABLE_NAME?.trim() || DEFAULT_NAME);
  const bucketName = options.bucket ?? (process.env.BUCKET_NAME?.trim() || `${tableName.toLowerCase()}-blobs`);
  // An empty QUEUE_URL (exported but unset) names no queue, as an empty TABLE_NAME names no table.
  const fromUrl = (options.queueUrl ?? (process.env.QUEUE_URL?.trim() || undefined))?.split('/').pop() || undefined;
  const queueName = (options.queueName ?? fromUrl ?? tableName).replace(/\.fifo$/, '');
  if (!TABLE_NAME.test(tableName)) throw new InvalidInputError(`--table ${JSON.stringify(tableName)}: a table name is 3 to 255 letters, digits, underscores, hyphens and dots`);
  if (!BUCKET_NAME.test(bucketName)) throw new InvalidInputError(`--bucket ${JSON.stringify(bucketName)}: a bucket name is 3 to 63 lowercase letters, digits, hyphens and dots`);
  if (!QUEUE_NAME.test(queueName)) throw new InvalidInputError(`--queue-name ${JSON.stringify(queueName)}: a queue name is 1 to 71 letters, digits, hyphens and underscores`);

  const [{ createAwsClients }, { ensureBucket, ensureQueue, ensureTable }, { errorName }, { assertAwsConfigured, unreachableEndpoint }] = await Promise.all([
    import('../../aws/clients.ts'), import('../../aws/provision.ts'), import('../../aws/dynamo-errors.ts'), import('../../aws/check-resources.ts'),
  ]);
  const clients = createAwsClients();
  try {
    await assertAwsConfigured(clients.dynamo);
    const region = await clients.dynamo.config.region();
    const unreachable = (resource: 'table' | 'bucket' | 'queue') => (error: unknown): never => {
      throw unreachableEndpoint(resource, error) ?? error;
    };
    const [, , queue] = await Promise.all([
      ensureTable(clients.dynamo, tableName).catch(unreachable('table')),
      ensureBucket(clients.s3, bucketName).catch((error: unknown) => {
        // Bucket names are global across all AWS accounts; the default one may well be taken.
        if (errorName(error) === 'BucketAlreadyExists') throw new InvalidInputError(`bucket name ${bucketName} is taken by another AWS account (bucket names are global): choose one with --bucket`);
        return unreachable('bucket')(error);
      }),
      ensureQueue(clients.sqs, queueName).catch(unreachable('queue')),
    ]);
    if (options.json) {
      out(JSON.stringify({ tableName, bucketName, queueUrl: queue.queueUrl, dlqUrl: queue.dlqUrl }, null, 2));
      return 0;
    }
    out(`AWS resources in ${region}, ready:`);
    out(`  table  ${tableName}  (DynamoDB, on demand, TTL on expiresAt)`);
    out(`  bucket ${bucketName}  (S3, encrypted, public access blocked)`);
    out(`  queue  ${queueName}.fifo  ${queue.queueUrl}  (dead letters: ${queue.dlqUrl})`);
    out(`use them: --backend aws --table ${tableName} --bucket ${bucketName} --queue-url ${queue.queueUrl}`);
    out(`      or: export STEPWISE_BACKEND=aws TABLE_NAME=${tableName} BUCKET_NAME=${bucketName} QUEUE_URL=${queue.queueUrl}`);
    return 0;
  } finally {
    clients.destroy();
  }
}
