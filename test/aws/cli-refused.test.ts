import { DynamoDBClient, DynamoDBServiceException } from '@aws-sdk/client-dynamodb';
import { SQSServiceException } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliErrorLine, cliExitCode, main } from '../../lib/cli/main.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

/**
 * AWS refusing what no retry mends (credentials, a permission, a KMS key) on the CLI: its own words are often
 * bare, so the line says which it is and what to do, and the exit code is 2, as for credentials not set at
 * all. No local server refuses credentials or permissions: the table's clients are mocked for these.
 */
let aws: TestResources;
beforeAll(async () => { aws = await createTestResources('cli-refused'); });
afterAll(() => aws?.close());

function dynamoError(name: string, message: string): DynamoDBServiceException {
  return new DynamoDBServiceException({ name, $fault: 'client', message, $metadata: { httpStatusCode: 400 } });
}

/** `stepwise status` on the AWS backend whose every table call fails with `error`: what it threw. */
async function statusRefused(error: Error): Promise<unknown> {
  const clients = [mockClient(DynamoDBClient), mockClient(DynamoDBDocumentClient)];
  for (const client of clients) client.onAnyCommand().rejects(error);
  try {
    await main(['status', '--backend', 'aws', '--table', aws.tableName], () => undefined, () => undefined);
  } catch (thrown) {
    return thrown;
  } finally {
    for (const client of clients) client.restore();
  }
  throw new Error('status did not fail');
}

describe('the CLI when AWS refuses a call for good', () => {
  it('expired or unknown credentials: says they were refused and how to refresh them, exit 2', async () => {
    for (const [name, message] of [
      ['ExpiredTokenException', 'The security token included in the request is expired'],
      ['UnrecognizedClientException', 'The security token included in the request is invalid.'],
    ]) {
      const error = await statusRefused(dynamoError(name!, message!));
      expect(cliErrorLine(error)).toBe(`${name}: ${message!.replace(/\.$/, '')}: AWS did not accept the credentials: refresh them (aws sso login, a new session token) or check AWS_PROFILE, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`);
      expect(cliExitCode(error)).toBe(2);
    }
  });

  it('a permission the identity lacks: AWS\'s words, then that it is the IAM policy to change, exit 2', async () => {
    const message = `User: arn:aws:iam::123456789012:user/ops is not authorized to perform: dynamodb:Query on resource: arn:aws:dynamodb:us-east-1:123456789012:table/${aws.tableName}/index/by-status because no identity-based policy allows the dynamodb:Query action`;
    const error = await statusRefused(dynamoError('AccessDeniedException', message));
    expect(cliErrorLine(error)).toBe(`AccessDeniedException: ${message}: the AWS identity may not make this call: allow it in the identity's IAM policy (or the resource's policy)`);
    expect(cliExitCode(error)).toBe(2);
  });

  it('a KMS key that cannot be used is said to be the key; a KMS throttle, a throttle, is not a refusal', () => {
    const disabled = new SQSServiceException({ name: 'KmsDisabled', $fault: 'client', message: 'The request was rejected because the specified KMS key is not enabled.', $metadata: { httpStatusCode: 400 } });
    expect(cliErrorLine(disabled)).toMatch(/^KmsDisabled: The request was rejected because the specified KMS key is not enabled: the KMS key that encrypts the table, queue or bucket is disabled, deleted or not usable by this identity: check the key's state and its key policy$/);
    expect(cliExitCode(disabled)).toBe(2);
    // S3's code for SSE-KMS on a disabled key, as the SDK names it.
    expect(cliExitCode(Object.assign(new Error('The key is disabled'), { name: 'KMS.DisabledException' }))).toBe(2);
    const throttled = new SQSServiceException({ name: 'KmsThrottled', $fault: 'client', message: 'Rate exceeded', $metadata: { httpStatusCode: 400 } });
    expect(cliErrorLine(throttled)).toBe('Rate exceeded');
    expect(cliExitCode(throttled)).toBe(1);
  });
});
