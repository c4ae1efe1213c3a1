import { join } from 'node:path';
import { CreateTableCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { createTestResources, queueDepth, uniqueName, type TestResources } from './aws-fixtures.ts';

/**
 * The CLI on the AWS backend with --table naming a table that is there but another application's: every
 * command said DynamoDB's "Query key condition not supported" or "The table does not have the specified
 * index" (exit 1), start wrote into a pk/sk table of another design, a worker retried its messages until it
 * was stopped, and prune, finding nothing in the table that refers to a blob, deleted every blob older than
 * a day in the bucket. Each is now refused in one line, exit 2, before it reads or writes anything.
 */
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const ENV = { STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '', STEPWISE_STACK: '' };
let aws: TestResources;
let keyedById: string;
let pkSkOnly: string;

beforeAll(async () => {
  aws = await createTestResources('cli-foreign');
  keyedById = uniqueName('other-app');
  pkSkOnly = uniqueName('single-table');
  await Promise.all([
    aws.clients.dynamo.send(new CreateTableCommand({
      TableName: keyedById, BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }], KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
    })),
    // Another single-table design: stepwise's key names, but not its status index.
    aws.clients.dynamo.send(new CreateTableCommand({
      TableName: pkSkOnly, BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }, { AttributeName: 'sk', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }, { AttributeName: 'sk', KeyType: 'RANGE' }],
    })),
  ]);
  await aws.clients.dynamo.send(new PutItemCommand({ TableName: keyedById, Item: { id: { S: 'theirs' } } }));
});
afterAll(() => aws?.close());

const refusal = (table: string, keys: string) => `stepwise: table ${table} exists and is not a stepwise table (its keys: ${keys}; `
  + 'a stepwise table\'s are pk HASH, sk RANGE, with the by-status index): check --table, TABLE_NAME or --stack\n';

describe('a table of another layout', () => {
  it('every command refuses it in one line, exit 2, writing nothing and leaving the queue empty', async () => {
    const commands = [
      ['status'], ['status', 'r'], ['history', 'r'], ['show', 'r'], ['start', '--agent', AGENT, '--goal', 'x', '--run-id', 'foreign-1'],
      ['approve', 'r'], ['cancel', 'r'], ['retry', 'r'], ['fork', 'r', '--from-step', '1'], ['worker', '--agent', AGENT, '--idle-exit-ms', '500'],
    ];
    for (const [table, keys] of [[keyedById, 'id HASH'], [pkSkOnly, 'pk HASH, sk RANGE']] as const) {
      for (const args of commands) {
        const r = await stepwiseCli([...args, '--backend', 'aws', '--table', table, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl], ENV);
        expect(r.err, `${args[0]} on ${table}`).toBe(refusal(table, keys));
        expect(r.code).toBe(2);
        // The worker stops before it says it is ready.
        expect(r.out).toBe('');
      }
    }
    expect(await queueDepth(aws.clients, aws.queueUrl)).toBe(0);
  });

  it('prune refuses it before it sweeps the bucket against it', async () => {
    // Swept against a table that cannot refer to a blob, every blob past the day's grace would go.
    const r = await stepwiseCli(['prune', '--backend', 'aws', '--table', keyedById, '--bucket', aws.bucketName], ENV);
    expect(r.err).toBe(refusal(keyedById, 'id HASH'));
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
  });
});
