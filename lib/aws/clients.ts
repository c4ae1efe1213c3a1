import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';

export interface AwsClientOptions {
  /** Defaults to the SDK's chain (AWS_REGION ...). */
  region?: string;
  /**
   * Path-style S3 URLs. Defaults to on when a custom S3 endpoint is configured (AWS_ENDPOINT_URL_S3 or
   * AWS_ENDPOINT_URL): emulators and private endpoints rarely resolve bucket subdomains.
   */
  s3ForcePathStyle?: boolean;
  /** Bounds one HTTP attempt, so a hung connection fails a step instead of eating the Lambda's time. */
  requestTimeoutMs?: number;
}

export interface AwsClients {
  dynamo: DynamoDBClient;
  doc: DynamoDBDocumentClient;
  sqs: SQSClient;
  s3: S3Client;
  destroy(): void;
}

/**
 * The SDK clients, configured once. Endpoints come only from the SDK's own settings (AWS_ENDPOINT_URL_*,
 * profiles), never from code paths special to tests, so a local DynamoDB or SQS is just configuration.
 */
export function createAwsClients(options: AwsClientOptions = {}, env: NodeJS.ProcessEnv = process.env): AwsClients {
  const common = {
    ...(options.region ? { region: options.region } : {}),
    // Without throwOnRequestTimeout the handler only prints a warning at requestTimeout and the request
    // waits on: a store that stops answering held a step, an API request or a CLI command for good.
    requestHandler: { connectionTimeout: 3_000, requestTimeout: options.requestTimeoutMs ?? 10_000, throwOnRequestTimeout: true },
  };
  const dynamo = new DynamoDBClient(common);
  const doc = DynamoDBDocumentClient.from(dynamo, { marshallOptions: { removeUndefinedValues: true } });
  // Requests go to the endpoint resolved from the region (or AWS_ENDPOINT_URL_SQS), not to the host in the
  // queue URL: for a real queue they are the same, and an emulator's queue URL host need not resolve.
  const sqs = new SQSClient({ ...common, useQueueUrlAsEndpoint: false });
  const s3 = new S3Client({
    ...common,
    forcePathStyle: options.s3ForcePathStyle ?? Boolean(env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL),
    // Blob puts carry their own SHA-256 checksum (it is also their key) and gets re-hash the content, so
    // the SDK's default CRC32 on every request adds nothing; S3 emulators also reject it on some paths.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  return {
    dynamo, doc, sqs, s3,
    destroy: () => {
      doc.destroy();
      dynamo.destroy();
      sqs.destroy();
      s3.destroy();
    },
  };
}
