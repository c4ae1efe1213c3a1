import { randomUUID } from 'node:crypto';
import { GetQueueAttributesCommand, ReceiveMessageCommand, type Message } from '@aws-sdk/client-sqs';
import type { AgentDefinition } from '../../lib/agent.ts';
import { createAwsClients, type AwsClients } from '../../lib/aws/clients.ts';
import { ensureBucket, ensureQueue, ensureTable, type QueueOptions } from '../../lib/aws/provision.ts';
import { openAwsRuntime, type AwsRuntime, type AwsRuntimeOptions } from '../../lib/aws/runtime.ts';
import { startRun } from '../../lib/engine/start.ts';
import { silentLogger } from '../../lib/log.ts';
import { systemClock } from '../../lib/ports.ts';

/** One test's own table, bucket and FIFO queue (with its DLQ) on the local servers. */
export interface TestResources {
  tableName: string;
  bucketName: string;
  queueUrl: string;
  dlqUrl: string;
  /** Clients for the test itself (inspection, setup), separate from any worker's. */
  clients: AwsClients;
  runtime(options?: Omit<AwsRuntimeOptions, 'tableName' | 'bucketName' | 'queueUrl'>): AwsRuntime;
  close(): void;
}

export function uniqueName(label: string): string {
  return `${label}-${randomUUID().slice(0, 8)}`.toLowerCase();
}

export async function createTestResources(label: string, queue: QueueOptions = {}): Promise<TestResources> {
  const clients = createAwsClients();
  const name = uniqueName(label);
  const tableName = `stepwise-${name}`;
  const bucketName = `stepwise-${name}`;
  const [, , urls] = await Promise.all([
    ensureTable(clients.dynamo, tableName),
    ensureBucket(clients.s3, bucketName),
    ensureQueue(clients.sqs, `stepwise-${name}`, { visibilityTimeoutSeconds: 30, ...queue }),
  ]);
  const opened: AwsRuntime[] = [];
  return {
    tableName, bucketName, queueUrl: urls.queueUrl, dlqUrl: urls.dlqUrl, clients,
    runtime: (options = {}) => {
      const runtime = openAwsRuntime({ tableName, bucketName, queueUrl: urls.queueUrl, clients, ...options });
      opened.push(runtime);
      return runtime;
    },
    close: () => {
      for (const runtime of opened) runtime.close();
      clients.destroy();
    },
  };
}

/** Messages waiting, in flight and delayed, as SQS reports them. */
export async function queueDepth(clients: AwsClients, queueUrl: string): Promise<number> {
  const { Attributes } = await clients.sqs.send(new GetQueueAttributesCommand({
    QueueUrl: queueUrl,
    AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
  }));
  return Number(Attributes?.ApproximateNumberOfMessages ?? 0)
    + Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
    + Number(Attributes?.ApproximateNumberOfMessagesDelayed ?? 0);
}

/** Takes every visible message off a queue (they come back after the visibility timeout unless deleted). */
export async function receiveAll(clients: AwsClients, queueUrl: string, visibilitySeconds = 30): Promise<Message[]> {
  const out: Message[] = [];
  for (;;) {
    const { Messages } = await clients.sqs.send(new ReceiveMessageCommand({
      QueueUrl: queueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: visibilitySeconds, WaitTimeSeconds: 0,
      MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
    }));
    if (!Messages?.length) return out;
    out.push(...Messages);
  }
}

/** Counts SDK commands by name on a client, for call-count assertions and the benchmarks. */
export function countCommands(client: { middlewareStack: { add(middleware: any, options: any): void } }): Map<string, number> {
  const counts = new Map<string, number>();
  client.middlewareStack.add(
    (next: (args: unknown) => Promise<unknown>, context: { commandName?: string }) => async (args: unknown) => {
      const name = context.commandName ?? 'unknown';
      counts.set(name, (counts.get(name) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: `count-${randomUUID()}` },
  );
  return counts;
}

/** Creates a run and enqueues its first step, as `stepwise start --backend aws` would. */
export async function startTestRun(runtime: AwsRuntime, agent: AgentDefinition, runId: string, goal = 'copy the rows in batches'): Promise<string> {
  const started = await startRun(
    { store: runtime.store, queue: runtime.queue, agent, clock: systemClock, workerId: 'starter', codeVersion: 'test', log: silentLogger },
    { goal, runId },
  );
  return started.runId;
}

/**
 * Sums the read capacity DynamoDB reports for the reads sent through a client (asking each read for
 * ReturnConsumedCapacity), for capacity assertions and the benchmarks.
 */
export function countReadUnits(client: { middlewareStack: { add(middleware: any, options: any): void } }): { units: number } {
  const counter = { units: 0 };
  client.middlewareStack.add(
    (next: (args: { input: Record<string, unknown> }) => Promise<{ output: Record<string, any> }>, context: { commandName?: string }) => async (args: { input: Record<string, unknown> }) => {
      const read = /^(Get|BatchGet|TransactGet|Query|Scan)/.test(context.commandName ?? '');
      if (read) args.input.ReturnConsumedCapacity = 'TOTAL';
      const result = await next(args);
      if (read) {
        for (const c of [result.output.ConsumedCapacity ?? []].flat() as { CapacityUnits?: number; ReadCapacityUnits?: number }[]) {
          counter.units += c.CapacityUnits ?? c.ReadCapacityUnits ?? 0;
        }
      }
      return result;
    },
    { step: 'initialize', name: `read-units-${randomUUID()}` },
  );
  return counter;
}
