import { randomUUID } from 'node:crypto';
import {
  ChangeMessageVisibilityCommand, DeleteMessageBatchCommand, ReceiveMessageCommand, type Message,
} from '@aws-sdk/client-sqs';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import type { AgentDefinition } from '../../lib/agent.ts';
import { createAwsClients, type AwsClients } from '../../lib/aws/clients.ts';
import type { AwsRuntime } from '../../lib/aws/runtime.ts';
import { createSqsWorkerHandler, type SqsWorkerHandler } from '../../lib/aws/sqs-worker-handler.ts';
import { isTerminal } from '../../lib/core/state.ts';
import type { CrashPoint } from '../../lib/engine/deps.ts';
import { silentLogger, type Logger } from '../../lib/log.ts';
import type { Clock, Model } from '../../lib/ports.ts';
import type { WaitServices } from '../../lib/waits/services.ts';
import { queueDepth, type TestResources } from './aws-fixtures.ts';

/** Thrown by a crash probe: the simulated process dies at that point. */
export class Crash extends Error {
  constructor(readonly point: CrashPoint, readonly step: number) {
    super(`crash at ${point} in step ${step}`);
  }
}

/** Any AWS call a dead process still attempts. */
export class ProcessDied extends Error {}

export interface WorkerProcessOptions {
  resources: TestResources;
  agent: AgentDefinition;
  model: Model;
  crash?: { point: CrashPoint; step: number };
  clock?: Clock;
  log?: Logger;
  maxReceives?: number;
  spillBytes?: number;
  /** Wait services, made from this container's runtime (its own clients). */
  waits?: (runtime: AwsRuntime) => WaitServices;
}

/**
 * One Lambda container: its own SDK clients and handler. A crash probe kills it at the chosen point:
 * from then on every AWS call it makes fails, so nothing after the crash point can reach DynamoDB, SQS
 * or S3, exactly as if the process had died there.
 */
export class WorkerProcess {
  dead = false;
  crashed = false;
  readonly clients: AwsClients;
  readonly runtime: AwsRuntime;
  readonly handler: SqsWorkerHandler;

  constructor(options: WorkerProcessOptions) {
    this.clients = createAwsClients();
    const stacks: { add(middleware: unknown, options: unknown): void }[] = [
      this.clients.dynamo.middlewareStack, this.clients.doc.middlewareStack, this.clients.sqs.middlewareStack, this.clients.s3.middlewareStack,
    ];
    for (const stack of stacks) {
      stack.add(
        (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
          if (this.dead) throw new ProcessDied('this worker process is dead');
          return next(args);
        },
        { step: 'initialize', name: `dead-process-${randomUUID()}` },
      );
    }
    this.runtime = options.resources.runtime({
      clients: this.clients,
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.spillBytes !== undefined ? { spillBytes: options.spillBytes } : {}),
    });
    const crash = options.crash;
    this.handler = createSqsWorkerHandler({
      runtime: this.runtime, agent: options.agent, model: options.model, log: options.log ?? silentLogger, codeVersion: 'test',
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.maxReceives !== undefined ? { maxReceives: options.maxReceives } : {}),
      ...(options.waits ? { waits: options.waits(this.runtime) } : {}),
      ...(crash ? {
        probe: (point: CrashPoint, at: { step: number }) => {
          if (this.crashed || point !== crash.point || at.step !== crash.step) return;
          this.crashed = true;
          this.dead = true;
          throw new Crash(point, at.step);
        },
      } : {}),
    });
  }

  close(): void {
    this.clients.destroy();
  }
}

export interface PollOptions {
  waitSeconds?: number;
  max?: number;
  /** The visibility timeout of the receive: how long a crashed batch stays hidden. */
  visibilitySeconds?: number;
  /** Wait out the visibility timeout after a crash instead of ending it at once. */
  realTimeouts?: boolean;
}

export interface PollResult {
  records: SQSRecord[];
  failures: string[];
  crashed: boolean;
  requestId: string;
}

/**
 * One turn of Lambda's SQS event source: receive a batch, invoke the handler, delete what succeeded and
 * leave the reported failures to come back. If the process died, nothing is deleted and every message of
 * the batch comes back when its visibility timeout ends (made immediate here instead of waiting it out).
 */
export async function pollOnce(
  control: AwsClients, queueUrl: string, worker: Pick<WorkerProcess, 'handler' | 'crashed'>,
  options: PollOptions = {},
): Promise<PollResult> {
  const requestId = randomUUID();
  const { Messages } = await control.sqs.send(new ReceiveMessageCommand({
    QueueUrl: queueUrl, MaxNumberOfMessages: options.max ?? 10, WaitTimeSeconds: options.waitSeconds ?? 1,
    VisibilityTimeout: options.visibilitySeconds ?? 30, MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
  }));
  if (!Messages?.length) return { records: [], failures: [], crashed: false, requestId };
  const records = Messages.map((m) => toSqsRecord(m, queueUrl));
  let failures: string[];
  try {
    const response = await worker.handler(sqsEvent(records), { awsRequestId: requestId });
    failures = response.batchItemFailures.map((f) => f.itemIdentifier);
  } catch (error) {
    if (!worker.crashed) throw error;
    failures = records.map((r) => r.messageId);
  }
  if (worker.crashed) {
    if (options.realTimeouts) return { records, failures: records.map((r) => r.messageId), crashed: true, requestId };
    await Promise.all(records.map((r) => control.sqs.send(new ChangeMessageVisibilityCommand({
      QueueUrl: queueUrl, ReceiptHandle: r.receiptHandle, VisibilityTimeout: 0,
    }))));
    return { records, failures: records.map((r) => r.messageId), crashed: true, requestId };
  }
  const done = records.filter((r) => !failures.includes(r.messageId));
  if (done.length) {
    await control.sqs.send(new DeleteMessageBatchCommand({
      QueueUrl: queueUrl, Entries: done.map((r, i) => ({ Id: String(i), ReceiptHandle: r.receiptHandle })),
    }));
  }
  return { records, failures, crashed: false, requestId };
}

/**
 * Runs Lambda invocations until the run has ended and its queue is empty. After a crash a new process
 * (container) takes over: `spawn(n)` makes the n-th one.
 */
export async function driveRun(options: {
  resources: TestResources; runId: string; spawn: (n: number) => WorkerProcess; maxPolls?: number; poll?: PollOptions;
}): Promise<{ polls: PollResult[]; workers: WorkerProcess[] }> {
  const { resources, runId } = options;
  const workers = [options.spawn(0)];
  const polls: PollResult[] = [];
  const store = resources.runtime().store;
  try {
    for (let i = 0; i < (options.maxPolls ?? 200); i++) {
      const stored = await store.load(runId);
      if (stored && isTerminal(stored.status) && (await queueDepth(resources.clients, resources.queueUrl)) === 0) {
        return { polls, workers };
      }
      const result = await pollOnce(resources.clients, resources.queueUrl, workers[workers.length - 1]!, options.poll);
      polls.push(result);
      if (result.crashed) {
        workers[workers.length - 1]!.close();
        workers.push(options.spawn(workers.length));
      }
    }
    throw new Error(`run ${runId} did not finish within ${options.maxPolls ?? 200} polls`);
  } finally {
    for (const worker of workers) worker.close();
  }
}

/**
 * The one message the queue holds, received by hand (30 s visible to no one else) as the Lambda service
 * would deliver it: for tests that hand a delivery to a container of their choosing.
 */
export async function receiveOneRecord(resources: Pick<TestResources, 'clients' | 'queueUrl'>): Promise<SQSRecord> {
  const { Messages } = await resources.clients.sqs.send(new ReceiveMessageCommand({
    QueueUrl: resources.queueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 2, VisibilityTimeout: 30,
    MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
  }));
  if (Messages?.length !== 1) throw new Error(`expected one message on ${resources.queueUrl}, got ${Messages?.length ?? 0}`);
  return toSqsRecord(Messages[0]!, resources.queueUrl);
}

export function toSqsRecord(message: Message, queueUrl: string): SQSRecord {
  const attributes = message.Attributes ?? {};
  return {
    messageId: message.MessageId!,
    receiptHandle: message.ReceiptHandle!,
    body: message.Body ?? '',
    attributes: {
      ApproximateReceiveCount: attributes.ApproximateReceiveCount ?? '1',
      SentTimestamp: attributes.SentTimestamp ?? String(Date.now()),
      SenderId: attributes.SenderId ?? 'local',
      ApproximateFirstReceiveTimestamp: attributes.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
      ...(attributes.MessageGroupId ? { MessageGroupId: attributes.MessageGroupId } : {}),
      ...(attributes.MessageDeduplicationId ? { MessageDeduplicationId: attributes.MessageDeduplicationId } : {}),
      ...(attributes.SequenceNumber ? { SequenceNumber: attributes.SequenceNumber } : {}),
    },
    messageAttributes: Object.fromEntries(Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [
      name, { dataType: value.DataType ?? 'String', ...(value.StringValue !== undefined ? { stringValue: value.StringValue } : {}) },
    ])),
    md5OfBody: message.MD5OfBody ?? '',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:us-east-1:000000000000:${queueUrl.split('/').pop()}`,
    awsRegion: 'us-east-1',
  };
}

export function sqsEvent(records: SQSRecord[]): SQSEvent {
  return { Records: records };
}
