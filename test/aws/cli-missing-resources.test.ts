import { join } from 'node:path';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openAwsRuntime } from '../../lib/aws/runtime.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { freePort } from '../support/aws-servers.ts';
import { createTestResources, uniqueName, type TestResources } from './aws-fixtures.ts';

/**
 * The CLI on the AWS backend with a resource that is not there (never deployed, a typo, another region):
 * one line that names it and says what to do, exit code 2, not the SDK's message. Real DynamoDB Local and
 * fauxqs answer; the names are ones nothing created.
 */
const AGENT = join(ROOT, 'test/support/process-agent.ts');
let aws: TestResources;
beforeAll(async () => { aws = await createTestResources('cli-missing'); });
afterAll(() => aws?.close());

const ENV = { STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', TABLE_NAME: '', BUCKET_NAME: '', QUEUE_URL: '', STEPWISE_STACK: '' };
const FIX = 'deploy the stack or run stepwise init --backend aws, or check AWS_REGION';
const REGION = process.env.AWS_REGION!;

describe('missing AWS resources', () => {
  it('a table that does not exist: status and history say so in one line, exit 2', async () => {
    const table = `stepwise-${uniqueName('nope')}`;
    for (const args of [['status'], ['history', 'some-run'], ['status', 'some-run']]) {
      const r = await stepwiseCli([...args, '--backend', 'aws', '--table', table, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl], ENV);
      expect(r.code).toBe(2);
      expect(r.err).toBe(`stepwise: table ${table} does not exist in ${REGION}: ${FIX}\n`);
      expect(r.out).toBe('');
    }
  });

  it('a queue that does not exist: start says so before it writes anything', async () => {
    const queueUrl = aws.queueUrl.replace(/[^/]+\.fifo$/, `${uniqueName('nope')}.fifo`);
    const r = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'x', '--run-id', 'missing-queue', '--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', queueUrl], ENV);
    expect(r.code).toBe(2);
    expect(r.err).toBe(`stepwise: queue ${queueUrl} does not exist in ${REGION}: ${FIX}\n`);
    // Nothing was lost or half-made: no run was created without its first message.
    expect(await aws.runtime().store.load('missing-queue')).toBeUndefined();
  });

  it('a queue URL of another region: start says so, not that it does not exist, before it writes anything', async () => {
    // The clients send to this region's endpoint, where that region's queue is never found.
    const queueUrl = `https://sqs.eu-west-1.amazonaws.com/000000000000/${aws.queueUrl.split('/').pop()}`;
    const r = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'x', '--run-id', 'other-region', '--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', queueUrl], ENV);
    expect(r.err).toBe(`stepwise: queue ${queueUrl} is in eu-west-1, and the AWS region is ${REGION}: set AWS_REGION=eu-west-1 if the table and bucket are there too, or name this region's queue\n`);
    expect(r.code).toBe(2);
    expect(await aws.runtime().store.load('other-region')).toBeUndefined();
    // The legacy host names its region too; a command that uses no queue does not look at it.
    const legacy = await stepwiseCli(['approve', 'other-region', '--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', `https://ap-south-1.queue.amazonaws.com/000000000000/q.fifo`], ENV);
    expect(legacy.err).toContain('is in ap-south-1, and the AWS region is');
    expect(legacy.code).toBe(2);
    const status = await stepwiseCli(['status', '--backend', 'aws', '--table', aws.tableName, '--queue-url', queueUrl], ENV);
    expect(status.err).toBe('');
    expect(status.code).toBe(0);
  });

  it('a queue that does not exist: cancel says so before it marks the run', async () => {
    const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'x', '--run-id', 'cancel-missing-queue', '--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl], ENV);
    expect(started.code, started.err).toBe(0);
    const queueUrl = aws.queueUrl.replace(/[^/]+\.fifo$/, `${uniqueName('nope')}.fifo`);
    const r = await stepwiseCli(['cancel', 'cancel-missing-queue', '--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', queueUrl], ENV);
    expect(r.code).toBe(2);
    expect(r.err).toBe(`stepwise: queue ${queueUrl} does not exist in ${REGION}: ${FIX}\n`);
    expect((await aws.runtime().store.load('cancel-missing-queue'))?.cancelRequested).toBeUndefined();
  });

  it('a bucket that does not exist: the worker says so at start, before taking any message', async () => {
    const bucket = `stepwise-${uniqueName('nope')}`;
    const r = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '500', '--backend', 'aws', '--table', aws.tableName, '--bucket', bucket, '--queue-url', aws.queueUrl], ENV);
    expect(r.code).toBe(2);
    expect(r.err).toBe(`stepwise: bucket ${bucket} does not exist in ${REGION}: ${FIX}\n`);
    expect(r.out).not.toContain('ready');
  });

  it('servers that are gone (a stopped npm run local-aws, its exports still in the shell): one line naming the endpoint, not the key file it removed', async () => {
    // Where nothing listens, as the stopped servers' ports; the session's key file went with them.
    const gone = `http://127.0.0.1:${await freePort()}`;
    const env = {
      ...ENV, AWS_ENDPOINT_URL_DYNAMODB: gone, AWS_ENDPOINT_URL_SQS: gone, AWS_ENDPOINT_URL_S3: gone, STEPWISE_BACKEND: 'aws',
      TABLE_NAME: 'stepwise', BUCKET_NAME: 'stepwise-blobs', QUEUE_URL: `${gone}/000000000000/stepwise.fifo`,
      STEPWISE_SIGNING_KEY_FILE: join(ROOT, '.stepwise', `${uniqueName('removed')}-signing.key`),
    };
    const line = (variable: string, resource: string) => `stepwise: nothing answers at ${gone} (${variable}, for the ${resource}): connect ECONNREFUSED ${gone.slice('http://'.length)}; `
      + 'start the server it names, or, if npm run local-aws wrote it, run that again and source the file it writes\n';
    for (const args of [['status'], ['start', '--agent', AGENT, '--goal', 'x'], ['approve', 'some-run'], ['worker', '--agent', AGENT, '--idle-exit-ms', '500']]) {
      const r = await stepwiseCli(args, env);
      expect(r.err, args[0]).toBe(line('AWS_ENDPOINT_URL_DYNAMODB', 'table'));
      expect(r.code).toBe(2);
      // The worker stops before it says it is ready.
      expect(r.out).toBe('');
    }
    // init makes all three at once: whichever call fails first is the line.
    const init = await stepwiseCli(['init', '--backend', 'aws'], env);
    expect(init.code).toBe(2);
    expect([line('AWS_ENDPOINT_URL_DYNAMODB', 'table'), line('AWS_ENDPOINT_URL_SQS', 'queue'), line('AWS_ENDPOINT_URL_S3', 'bucket')]).toContain(init.err);
  });

  it('a command that only reads needs the table alone; one that moves runs needs all three named', async () => {
    const named = ['--backend', 'aws', '--table', aws.tableName];
    const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'x', '--run-id', 'table-only', ...named, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl], ENV);
    expect(started.code, started.err).toBe(0);
    for (const args of [['status'], ['status', 'table-only'], ['history', 'table-only'], ['show', 'table-only']]) {
      const r = await stepwiseCli([...args, ...named], ENV);
      expect(r.err, args.join(' ')).toBe('');
      expect(r.code).toBe(0);
      expect(r.out).toContain('running');
    }
    const start = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'x', '--run-id', 'table-only-2', ...named], ENV);
    expect(start.code).toBe(2);
    expect(start.err).toBe('stepwise: the AWS backend needs BUCKET_NAME, QUEUE_URL (environment) or the matching options\n');
    expect(await aws.runtime().store.load('table-only-2')).toBeUndefined();
    const cancel = await stepwiseCli(['cancel', 'table-only', ...named, '--queue-url', aws.queueUrl], ENV);
    expect(cancel.code).toBe(2);
    expect(cancel.err).toContain('needs BUCKET_NAME (environment)');
    expect((await aws.runtime().store.load('table-only'))?.cancelRequested).toBeUndefined();
  });

  it('a bucket or queue left unnamed: each call on it is refused with what to set, not the SDK\'s words', async () => {
    const runtime = openAwsRuntime({ tableName: aws.tableName, clients: aws.clients, needs: ['table'] }, {});
    await expect(runtime.blobs.get('sha256:00')).rejects.toThrow('this needs the bucket, and none is named: set --bucket, BUCKET_NAME or --stack');
    await expect(runtime.queue.send({ runId: 'r', version: 1 })).rejects.toThrow('this needs the queue, and none is named: set --queue-url, QUEUE_URL or --stack');
    // The table still works, and the stand-ins are not mistaken for promises.
    expect(await runtime.store.load('no-such-run')).toBeUndefined();
    expect(await Promise.resolve(runtime.blobs)).toBe(runtime.blobs);
    // Logged or printed, it rejects nothing (an unhandled rejection would end the process; vitest fails on one).
    expect(inspect(runtime.queue)).toBe('{}');
    expect(`${String(runtime.blobs)} ${JSON.stringify({ queue: runtime.queue })}`).toBe('[object Object] {"queue":{}}');
    expect(() => openAwsRuntime({ clients: aws.clients, needs: ['table'] }, {})).toThrow('the AWS backend needs TABLE_NAME (environment)');
  });

  it('names pasted with spaces or a newline into a function\'s environment: taken trimmed, and a blank one is missing', async () => {
    expect(() => openAwsRuntime({ clients: aws.clients }, { TABLE_NAME: ' ', BUCKET_NAME: aws.bucketName, QUEUE_URL: aws.queueUrl }))
      .toThrow('the AWS backend needs TABLE_NAME (environment)');
    // The queue URL was refused as 'not a FIFO queue', and the table name sent to DynamoDB with its space.
    const runtime = openAwsRuntime({ clients: aws.clients }, { TABLE_NAME: ` ${aws.tableName} `, BUCKET_NAME: `${aws.bucketName}\n`, QUEUE_URL: `${aws.queueUrl} \n` });
    expect([runtime.tableName, runtime.bucketName, runtime.queueUrl]).toEqual([aws.tableName, aws.bucketName, aws.queueUrl]);
    expect(await runtime.store.load('no-such-run')).toBeUndefined();
  });
});
