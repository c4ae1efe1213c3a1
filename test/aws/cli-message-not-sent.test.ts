import { join } from 'node:path';
import { GetQueueAttributesCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../lib/cli/main.ts';
import { isPermanent } from '../../lib/core/errors.ts';
import { ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { createTestResources, queueDepth, receiveAll, type TestResources } from './aws-fixtures.ts';

/**
 * start and fork on AWS write the run, then send its first message. SQS refusing the send (throttled past
 * the SDK's retries: a fault fauxqs cannot be made to produce, so SendMessage alone is mocked; the table is
 * DynamoDB Local's) left the SDK's words alone, "Rate exceeded": a start without --run-id did not say which
 * run it had made, and the same command again made a second run for the same goal, which the sweep then
 * moved beside the first. The line names the run and the command that sends its message now.
 */
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const effects = tempDb();
let aws: TestResources;
const saved = { ...process.env };

beforeAll(async () => {
  aws = await createTestResources('cli-not-sent');
  Object.assign(process.env, {
    EFFECTS_DB: effects.path, PROCESS_AGENT_ROWS: '1', STEPWISE_LOG_LEVEL: 'silent', ANTHROPIC_API_KEY: '', STEPWISE_BACKEND: 'aws',
    TABLE_NAME: aws.tableName, BUCKET_NAME: aws.bucketName, QUEUE_URL: aws.queueUrl,
  });
  delete process.env.STEPWISE_STACK;
});
afterAll(() => {
  process.env = saved;
  aws?.close();
  effects.cleanup();
});

async function stepwise(...args: string[]): Promise<string> {
  const lines: string[] = [];
  await main(args, (line) => lines.push(line));
  return lines.join('\n');
}

/** Runs the command while SQS throttles every send (the queue still answers the check that it exists). */
async function throttled(...args: string[]): Promise<Error> {
  const sqs = mockClient(SQSClient);
  sqs.on(GetQueueAttributesCommand).resolves({ Attributes: { QueueArn: 'arn:aws:sqs:us-east-1:000000000000:q.fifo' } });
  sqs.on(SendMessageCommand).rejects(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }));
  try {
    return await stepwise(...args).then(() => { throw new Error('the command succeeded'); }, (error: Error) => error);
  } finally {
    sqs.restore();
  }
}

async function runIds(): Promise<string[]> {
  return (JSON.parse(await stepwise('status', '--json')) as { runId: string }[]).map((r) => r.runId).sort();
}

describe('a start or fork whose run is saved and whose message is not sent', () => {
  it('names the run and the command that sends it; that command sends it and makes no second run', async () => {
    const error = await throttled('start', '--agent', AGENT, '--goal', 'write 1 row');
    const [runId] = await runIds();
    expect(runId).toBeDefined();
    expect(error.message).toBe(`run ${runId} is saved at version 1, but its message to the workers was not sent (Rate exceeded): `
      + `a worker's sweep sends it again once the run has stalled; or run this start again with --run-id ${runId}, which sends it now and makes no other run`);
    // Not the user's input to fix: exit code 1.
    expect(isPermanent(error)).toBe(false);
    expect(await queueDepth(aws.clients, aws.queueUrl)).toBe(0);

    expect(await stepwise('start', '--agent', AGENT, '--goal', 'write 1 row', '--run-id', runId!)).toContain(`run ${runId} already exists (status running, version 1): nothing changed`);
    expect(await runIds()).toEqual([runId]);
    const sent = await receiveAll(aws.clients, aws.queueUrl, 1);
    expect(sent.map((m) => JSON.parse(m.Body!) as unknown)).toEqual([{ runId, version: 1 }]);
  });

  it('a fork says the same with its own command', async () => {
    await stepwise('start', '--agent', AGENT, '--goal', 'write 1 row', '--run-id', 'parent');
    expect(await stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '1500')).toContain('run parent v3  completed');
    const error = await throttled('fork', 'parent', '--from-step', '1', '--agent', AGENT);
    const forkId = (await runIds()).find((id) => id.startsWith('parent-fork-1-'));
    expect(forkId).toBeDefined();
    expect(error.message).toMatch(new RegExp(`^run ${forkId} is saved at version 1, but its message to the workers was not sent \\(Rate exceeded\\): .*; `
      + `or run this fork again with --run-id ${forkId}, which sends it now and makes no other run$`));
  });
});
