import { join } from 'node:path';
import { DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { HeadBucketCommand } from '@aws-sdk/client-s3';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients, type AwsClients } from '../../lib/aws/clients.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { uniqueName } from './aws-fixtures.ts';

/** `stepwise init --backend aws`: the table, bucket and queue for trying the AWS runtime without CDK. */
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const effects = tempDb();
let clients: AwsClients;
beforeAll(() => { clients = createAwsClients(); });
afterAll(() => { clients?.destroy(); effects.cleanup(); });

const ENV = { STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '', STEPWISE_STACK: '', EFFECTS_DB: effects.path, PROCESS_AGENT_ROWS: '2' };

describe('stepwise init --backend aws', () => {
  it('creates the table, bucket and FIFO queue, prints them, and a second init changes nothing', async () => {
    const name = `stepwise-${uniqueName('init')}`;
    const init = await stepwiseCli(['init', '--backend', 'aws', '--table', name, '--bucket', name, '--queue-name', name, '--json'], ENV);
    expect(init.err).toBe('');
    expect(init.code).toBe(0);
    const made = JSON.parse(init.out) as { tableName: string; bucketName: string; queueUrl: string; dlqUrl: string };
    expect(made).toMatchObject({ tableName: name, bucketName: name, queueUrl: expect.stringMatching(new RegExp(`/${name}\\.fifo$`)), dlqUrl: expect.stringMatching(new RegExp(`/${name}-dlq\\.fifo$`)) });

    const table = (await clients.dynamo.send(new DescribeTableCommand({ TableName: name }))).Table!;
    expect(table.GlobalSecondaryIndexes?.map((i) => i.IndexName).sort()).toEqual(['by-status', 'by-wait-deadline'].sort());
    expect((await clients.dynamo.send(new DescribeTimeToLiveCommand({ TableName: name }))).TimeToLiveDescription?.AttributeName).toBe('expiresAt');
    const queue = (await clients.sqs.send(new GetQueueAttributesCommand({ QueueUrl: made.queueUrl, AttributeNames: ['All'] }))).Attributes!;
    expect(queue.FifoQueue).toBe('true');
    expect(JSON.parse(queue.RedrivePolicy!)).toMatchObject({ maxReceiveCount: 15 });
    // fauxqs keeps no bucket encryption settings to read back; that the bucket is there is what it can tell.
    await clients.s3.send(new HeadBucketCommand({ Bucket: name }));

    const again = await stepwiseCli(['init', '--backend', 'aws', '--table', name, '--bucket', name, '--queue-name', name, '--json'], ENV);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.out)).toEqual(made);
  });

  it('prints the flags to use them, and the resources work a run to completion', async () => {
    const name = `stepwise-${uniqueName('init-run')}`;
    const init = await stepwiseCli(['init', '--backend', 'aws', '--table', name, '--bucket', name, '--queue-name', name], ENV);
    expect(init.code).toBe(0);
    const flags = /--backend aws --table \S+ --bucket \S+ --queue-url (\S+)/.exec(init.out);
    expect(flags, init.out).not.toBeNull();
    const use = flags![0].split(' ');
    expect(init.out).toContain(`table ${name}`);
    expect(init.out).toContain(`bucket ${name}`);
    const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'init-1', ...use], ENV);
    expect(started.code, started.err).toBe(0);
    const worker = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '2500', ...use], ENV);
    expect(worker.out).toContain('run init-1 v4  completed after 2 steps: wrote 2 rows');
  });

  it('init on the local backend makes the database file; a bad queue name is a one-line error', async () => {
    const local = await stepwiseCli(['init', '--db', join(effects.path, '..', 'made.db')], ENV);
    expect(local.code).toBe(0);
    expect(local.out).toContain(`database ${join(effects.path, '..', 'made.db')} ready`);
    const bad = await stepwiseCli(['init', '--backend', 'aws', '--queue-name', 'has spaces'], ENV);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/^stepwise: --queue-name .* letters, digits, hyphens and underscores/);
  });
});
