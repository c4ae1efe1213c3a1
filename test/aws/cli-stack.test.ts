import { join } from 'node:path';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../lib/cli/main.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

/**
 * `--stack <name>` / STEPWISE_STACK: the CLI reads the table, bucket and queue from the deployed stack's
 * outputs. There is no local CloudFormation server, so DescribeStacks alone is mocked; its outputs name
 * real resources on DynamoDB Local and fauxqs, which every other call reaches.
 */
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const EVENT_AGENT = join(ROOT, 'test/support/event-agent.ts');
const effects = tempDb();
let aws: TestResources;
const cloudformation = mockClient(CloudFormationClient);
const saved = { ...process.env };

beforeAll(async () => {
  aws = await createTestResources('cli-stack');
  Object.assign(process.env, { EFFECTS_DB: effects.path, STEPWISE_DB: join(effects.path, '..', 'local.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_LOG_LEVEL: 'silent', ANTHROPIC_API_KEY: '' });
  for (const name of ['TABLE_NAME', 'BUCKET_NAME', 'QUEUE_URL', 'STEPWISE_STACK', 'STEPWISE_BACKEND']) delete process.env[name];
});
afterEach(() => {
  cloudformation.reset();
  delete process.env.STEPWISE_STACK;
});
afterAll(() => {
  process.env = saved;
  cloudformation.restore();
  aws?.close();
  effects.cleanup();
});

function deployed(stackName: string, agentNames?: string[]) {
  cloudformation.on(DescribeStacksCommand, { StackName: stackName }).resolves({
    Stacks: [{
      StackName: stackName, StackStatus: 'UPDATE_COMPLETE', CreationTime: new Date(),
      Outputs: [
        { OutputKey: 'TableName', OutputValue: aws.tableName },
        { OutputKey: 'BucketName', OutputValue: aws.bucketName },
        { OutputKey: 'QueueUrl', OutputValue: aws.queueUrl },
        { OutputKey: 'ApiUrl', OutputValue: 'https://example.execute-api.us-east-1.amazonaws.com/' },
        ...(agentNames ? [{ OutputKey: 'AgentNames', OutputValue: JSON.stringify(agentNames) }] : []),
      ],
    }],
  });
}

async function stepwise(...args: string[]): Promise<{ code: number; out: string }> {
  const lines: string[] = [];
  const code = await main(args, (line) => lines.push(line));
  return { code, out: lines.join('\n') };
}

describe('the CLI against a deployed stack', () => {
  it('start, worker, status and history find the table, bucket and queue from the stack outputs', async () => {
    deployed('stepwise-demo');
    const started = await stepwise('start', '--stack', 'stepwise-demo', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'stack-1');
    expect(started.out).toContain('started run stack-1');
    const worker = await stepwise('worker', '--stack', 'stepwise-demo', '--agent', AGENT, '--idle-exit-ms', '2500');
    expect(worker.code).toBe(0);
    expect(worker.out).toContain('run stack-1 v4  completed after 2 steps: wrote 2 rows');
    const status = JSON.parse((await stepwise('status', 'stack-1', '--stack', 'stepwise-demo', '--json')).out) as { status: string; version: number };
    expect(status).toMatchObject({ status: 'completed', version: 4 });
    const history = JSON.parse((await stepwise('history', 'stack-1', '--stack', 'stepwise-demo', '--json')).out) as { version: number }[];
    expect(history.map((h) => h.version)).toEqual([1, 2, 3, 4]);
    // The run really is in the stack's table: read it without the CLI.
    expect((await aws.runtime().store.load('stack-1'))?.status).toBe('completed');
    expect(cloudformation.commandCalls(DescribeStacksCommand).map((c) => c.args[0].input.StackName)).toEqual(Array(4).fill('stepwise-demo'));
  });

  it('STEPWISE_STACK does the same without the flag; an explicit --table still wins over the stack', async () => {
    deployed('from-env');
    process.env.STEPWISE_STACK = 'from-env';
    const table = await stepwise('status');
    expect(table.out).toMatch(/stack-1\s+completed/);
    await expect(stepwise('status', '--table', 'stepwise-not-this-one')).rejects.toThrow('table stepwise-not-this-one does not exist');
  });

  it('a stack that does not exist, or has no stepwise outputs, is a one-line bad-input error', async () => {
    cloudformation.on(DescribeStacksCommand).rejects(Object.assign(new Error('Stack with id gone does not exist'), { name: 'ValidationError' }));
    const gone = stepwise('status', '--stack', 'gone');
    await expect(gone).rejects.toThrow(InvalidInputError);
    await expect(gone).rejects.toThrow(/^stack gone does not exist in us-east-1: deploy it \(cdk deploy\), or check --stack, STEPWISE_STACK and AWS_REGION$/);
    cloudformation.reset();
    cloudformation.on(DescribeStacksCommand).resolves({ Stacks: [{ StackName: 'other', StackStatus: 'CREATE_COMPLETE', CreationTime: new Date(), Outputs: [{ OutputKey: 'TableName', OutputValue: aws.tableName }] }] });
    await expect(stepwise('start', '--stack', 'other', '--agent', AGENT, '--goal', 'x')).rejects.toThrow(
      'stack other has no output BucketName, QueueUrl: is it a stepwise stack? (its outputs: TableName)',
    );
  });

  it('agents sharing the table: with a stack\'s AgentNames, or --agent, the CLI sends to the queue only runs its agent\'s workers take', { timeout: 60_000 }, async () => {
    // Agent event-cli's run, through its own queue (here the same one, named by --queue-url): waiting for an event.
    const own = ['--backend', 'aws', '--table', aws.tableName, '--bucket', aws.bucketName, '--queue-url', aws.queueUrl];
    await stepwise('start', ...own, '--agent', EVENT_AGENT, '--goal', 'wait to be paid', '--run-id', 'shared-1');
    expect((await stepwise('worker', ...own, '--agent', EVENT_AGENT, '--idle-exit-ms', '2500')).code).toBe(0);
    const waiting = await aws.runtime().store.load('shared-1');
    expect(waiting?.status).toBe('waiting');
    // Stack shop-a is agent process-rows's: its queue's workers would hand event-cli's run back.
    deployed('shop-a', ['process-rows', 'rows-v0']);
    const emitted = await stepwise('emit', 'order.paid', 'order-42', '--stack', 'shop-a');
    expect(emitted.out).toMatch(/: no run was waiting for it; kept for a wait that begins soon$/);
    const refusal = 'run shared-1 belongs to agent "event-cli", but this queue is agent "process-rows"\'s (stack shop-a), whose workers would not take it: name the stack or queue of agent "event-cli" (--stack, --queue-url)';
    for (const command of [['approve', 'shared-1'], ['reject', 'shared-1'], ['cancel', 'shared-1'], ['retry', 'shared-1'], ['fork', 'shared-1', '--from-step', '0']]) {
      await expect(stepwise(...command, '--stack', 'shop-a'), command[0]).rejects.toThrow(refusal);
    }
    await expect(stepwise('start', '--stack', 'shop-a', '--agent', EVENT_AGENT, '--goal', 'x')).rejects.toThrow(
      'stack shop-a\'s queue is agent "process-rows"\'s, and the agent loaded is "event-cli": its workers would not take runs of it; name agent "event-cli"\'s own stack, or deploy it to this one first',
    );
    await expect(stepwise('worker', '--stack', 'shop-a', '--agent', EVENT_AGENT, '--idle-exit-ms', '0')).rejects.toThrow('this worker would hand back every run on it');
    // Its API would start runs of event-cli on process-rows's queue: refused before it listens.
    await expect(stepwise('serve', '--stack', 'shop-a', '--agent', EVENT_AGENT, '--port', '0')).rejects.toThrow(new InvalidInputError(
      'stack shop-a\'s queue is agent "process-rows"\'s, and the agent loaded is "event-cli": its workers would not take runs of it; name agent "event-cli"\'s own stack, or deploy it to this one first',
    ));
    // Without the output (--queue-url names the queue), --agent says whose it is.
    await expect(stepwise('cancel', 'shared-1', ...own, '--agent', AGENT)).rejects.toThrow('this queue is agent "process-rows"\'s (--agent)');
    expect((await aws.runtime().store.load('shared-1'))?.version).toBe(waiting!.version);
    // Its own agent's: resumed, and its worker finishes it.
    const resumed = await stepwise('emit', 'order.paid', 'order-42', ...own, '--agent', EVENT_AGENT);
    expect(resumed.out).toContain('resumed shared-1');
    expect((await stepwise('worker', ...own, '--agent', EVENT_AGENT, '--idle-exit-ms', '2500')).code).toBe(0);
    expect((await aws.runtime().store.load('shared-1'))?.status).toBe('completed');
  });

  it('a stack whose AgentNames output is not a JSON array of names is a one-line bad-input error', async () => {
    cloudformation.on(DescribeStacksCommand).resolves({ Stacks: [{ StackName: 'odd', StackStatus: 'CREATE_COMPLETE', CreationTime: new Date(), Outputs: [
      { OutputKey: 'TableName', OutputValue: aws.tableName }, { OutputKey: 'BucketName', OutputValue: aws.bucketName },
      { OutputKey: 'QueueUrl', OutputValue: aws.queueUrl }, { OutputKey: 'AgentNames', OutputValue: 'process-rows' },
    ] }] });
    await expect(stepwise('status', '--stack', 'odd')).rejects.toThrow(new InvalidInputError('stack odd\'s output AgentNames is not a JSON array of agent names: process-rows'));
  });

  it('--stack belongs to the AWS backend', async () => {
    await expect(stepwise('status', '--stack', 'x', '--backend', 'local')).rejects.toThrow('--stack names a deployed AWS stack; it does not go with --backend local');
  });
});
