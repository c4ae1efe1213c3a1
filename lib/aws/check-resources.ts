import { DescribeTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { HeadBucketCommand } from '@aws-sdk/client-s3';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { InvalidInputError } from '../core/errors.ts';
import type { AwsClients } from './clients.ts';
import { errorName } from './dynamo-errors.ts';
import { notStepwiseTable } from './table-layout.ts';

export type AwsResource = 'table' | 'bucket' | 'queue';

export const MISSING_RESOURCE_FIX = 'deploy the stack or run stepwise init --backend aws';

/**
 * The region and credentials the SDK's default chains resolve (environment, profile, instance role),
 * resolved once before any call: without them every call fails with the SDK's "Region is missing" or
 * "Could not load credentials from any providers", which are the user's setup to fix (exit code 2, one
 * line with the fix), not a failure of stepwise. Run before a stack's outputs are read, which needs both.
 */
export async function assertAwsConfigured(client?: Pick<DynamoDBClient, 'config'>): Promise<void> {
  // A client of the caller's when it has one, so its chains are resolved (and kept) once, not twice.
  if (client) return checkChains(client);
  const own = new DynamoDBClient({});
  try {
    await checkChains(own);
  } finally {
    own.destroy();
  }
}

async function checkChains(client: Pick<DynamoDBClient, 'config'>): Promise<void> {
  try {
    await client.config.region();
  } catch {
    throw new InvalidInputError('no AWS region: set AWS_REGION, or AWS_PROFILE naming a profile that has one');
  }
  try {
    await client.config.credentials();
  } catch (error) {
    throw new InvalidInputError(`no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (${(error as Error).message})`);
  }
}

/** The names the SDKs give "not there" (SQS has two protocols' worth; HeadBucket's 404 has no body). */
const NOT_FOUND: Record<AwsResource, readonly string[]> = {
  table: ['ResourceNotFoundException'],
  queue: ['QueueDoesNotExist', 'AWS.SimpleQueueService.NonExistentQueue'],
  bucket: ['NoSuchBucket', 'NotFound'],
};

/** The resource a not-found answer is about: a table, queue or bucket that is not there (in this region). */
export function missingResource(error: unknown): AwsResource | undefined {
  const name = errorName(error);
  return (Object.keys(NOT_FOUND) as AwsResource[]).find((resource) => NOT_FOUND[resource].includes(name));
}

/** The SDK's own variables for an endpoint of each service's, the most specific first. */
const ENDPOINT_ENV: Record<AwsResource, readonly string[]> = {
  table: ['AWS_ENDPOINT_URL_DYNAMODB', 'AWS_ENDPOINT_URL'],
  queue: ['AWS_ENDPOINT_URL_SQS', 'AWS_ENDPOINT_URL'],
  bucket: ['AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL'],
};
/** A connection that never opened: nothing listens there, or the name does not resolve. */
const UNREACHABLE = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH'];

/** An endpoint the environment names where nothing answers (unreachableEndpoint). */
export class UnreachableEndpointError extends InvalidInputError {}

/**
 * An endpoint the environment names where nothing answers, most often the servers of an `npm run
 * local-aws` that has stopped, its exports still in the shell: one line naming the variable and what to
 * do (exit code 2), where the SDK's own is a bare `connect ECONNREFUSED 127.0.0.1:36513`. Undefined for
 * any other error, or when no variable chose the endpoint (AWS's own, a network fault, not a setting).
 */
export function unreachableEndpoint(resource: AwsResource, error: unknown, env: NodeJS.ProcessEnv = process.env): UnreachableEndpointError | undefined {
  if (!UNREACHABLE.includes(String((error as { code?: unknown })?.code))) return undefined;
  const variable = ENDPOINT_ENV[resource].find((name) => env[name]?.trim());
  if (!variable) return undefined;
  return new UnreachableEndpointError(`nothing answers at ${env[variable]!.trim()} (${variable}, for the ${resource}): ${(error as Error).message}; `
    + 'start the server it names, or, if npm run local-aws wrote it, run that again and source the file it writes');
}

/**
 * Checks, in one round of parallel calls, that the resources a command is about to use exist, so a table
 * that was never deployed (a typo, another region) is one line naming it with the fix, exit code 2,
 * before anything is written, and not the SDK's "Cannot do operations on a non-existent table". Only a
 * not-found answer counts, or an endpoint set in the environment where nothing answers: any other error
 * (no permission to describe) is left to the real call. A table that is there but another application's
 * (a --table naming the wrong one) is refused too: every read of it failed with DynamoDB's words about
 * key conditions, a worker retried its messages until it was stopped, and `prune`, finding no
 * references in it, would have deleted every blob in the bucket.
 */
export async function assertResourcesExist(
  clients: Pick<AwsClients, 'dynamo' | 'sqs' | 's3'>,
  names: { tableName: string; bucketName: string; queueUrl: string },
  uses: readonly AwsResource[],
): Promise<void> {
  const probes: Record<AwsResource, () => Promise<unknown>> = {
    table: async () => {
      const { Table } = await clients.dynamo.send(new DescribeTableCommand({ TableName: names.tableName }));
      const foreign = notStepwiseTable(names.tableName, Table);
      if (foreign) throw new InvalidInputError(`${foreign}: check --table, TABLE_NAME or --stack`);
    },
    queue: () => clients.sqs.send(new GetQueueAttributesCommand({ QueueUrl: names.queueUrl, AttributeNames: ['QueueArn'] })),
    bucket: () => clients.s3.send(new HeadBucketCommand({ Bucket: names.bucketName })),
  };
  const label: Record<AwsResource, string> = { table: names.tableName, queue: names.queueUrl, bucket: names.bucketName };
  const region = await clients.dynamo.config.region();
  const elsewhere = uses.includes('queue') ? queueRegion(names.queueUrl) : undefined;
  if (elsewhere && elsewhere !== region) {
    throw new InvalidInputError(`queue ${names.queueUrl} is in ${elsewhere}, and the AWS region is ${region}: `
      + `set AWS_REGION=${elsewhere} if the table and bucket are there too, or name this region's queue`);
  }
  const refusals = await Promise.all(uses.map(async (resource) => {
    try {
      await probes[resource]();
      return undefined;
    } catch (error) {
      if (error instanceof InvalidInputError) return error;
      // The region is named: a resource deployed in another one is not there for this command either.
      if (NOT_FOUND[resource].includes(errorName(error))) return new InvalidInputError(`${resource} ${label[resource]} does not exist in ${region}: ${MISSING_RESOURCE_FIX}, or check AWS_REGION`);
      return unreachableEndpoint(resource, error);
    }
  }));
  const first = refusals.find((refusal) => refusal !== undefined);
  if (first) throw first;
}

/** SQS's own hosts, which name the queue's region: sqs.<region>.amazonaws.com and the older <region>.queue.amazonaws.com. */
const QUEUE_HOST = /^(?:sqs(?:-fips)?\.([a-z0-9-]+)\.(?:amazonaws\.com(?:\.cn)?|api\.aws)|([a-z0-9-]+)\.queue\.amazonaws\.com(?:\.cn)?)$/;

/**
 * The region an AWS queue URL names, undefined for any other (an emulator's, a private endpoint's). The
 * clients send to the region's endpoint, not to the URL's host (clients.ts), so a queue of another region is
 * never found there: said as such, where it was "does not exist: deploy the stack or run stepwise init",
 * which would make a second queue in the wrong region. `queue.amazonaws.com` is us-east-1's legacy host.
 */
export function queueRegion(queueUrl: string): string | undefined {
  let host: string;
  try {
    host = new URL(queueUrl).hostname.toLowerCase();
  } catch {
    return undefined;
  }
  if (host === 'queue.amazonaws.com') return 'us-east-1';
  const match = QUEUE_HOST.exec(host);
  return match ? match[1] ?? match[2] : undefined;
}
