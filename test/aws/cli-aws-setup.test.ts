import { describe, expect, it } from 'vitest';
import { stepwiseCli } from '../support/cli.ts';

/**
 * The CLI on the AWS backend where the SDK can find no region or no credentials: one line with the fix,
 * exit code 2, before any call (and before a stack's outputs are read), not the SDK's bare message with
 * exit code 1. No server is needed: nothing is called.
 */
const NO_AWS = {
  AWS_REGION: '', AWS_DEFAULT_REGION: '', AWS_PROFILE: '', AWS_ACCESS_KEY_ID: '', AWS_SECRET_ACCESS_KEY: '', AWS_SESSION_TOKEN: '',
  AWS_CONFIG_FILE: '/nonexistent/aws-config', AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
  AWS_EC2_METADATA_DISABLED: 'true', AWS_CONTAINER_CREDENTIALS_FULL_URI: '', AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: '', AWS_WEB_IDENTITY_TOKEN_FILE: '',
  STEPWISE_LOG_LEVEL: 'warn', TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '', STEPWISE_STACK: '',
};
const NAMES = ['--table', 'stepwise-t', '--bucket', 'stepwise-b', '--queue-url', 'https://sqs.example/1/q.fifo'];
const NO_REGION = 'stepwise: no AWS region: set AWS_REGION, or AWS_PROFILE naming a profile that has one\n';

describe('the AWS backend without a region or credentials', () => {
  it.each([
    [['status', '--backend', 'aws', ...NAMES]],
    [['init', '--backend', 'aws']],
    [['status', '--stack', 'stepwise-dev']],
  ])('%j without a region: exit 2 and the fix', async (args) => {
    const r = await stepwiseCli(args, NO_AWS);
    expect(r.err).toBe(NO_REGION);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
  });

  it.each([
    [['status', '--backend', 'aws', ...NAMES]],
    [['init', '--backend', 'aws']],
  ])('%j with a region and no credentials: exit 2 and the fix, with what the SDK said', async (args) => {
    const r = await stepwiseCli(args, { ...NO_AWS, AWS_REGION: 'us-east-1' });
    expect(r.err).toMatch(/^stepwise: no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \(.+\)\n$/);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
  });
});
