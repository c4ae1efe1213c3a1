import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { AgentDefinition } from '../agent.ts';
import { errorMessage } from '../core/errors.ts';
import type { CrashPoint, EngineDeps } from '../engine/deps.ts';
import { handleDelivery, parseMessage, retryDelayMs, type Handled } from '../engine/handle-message.ts';
import { withFields, type Logger } from '../log.ts';
import type { BlobStore, CheckpointStore, Clock, IdempotencyLedger, Model } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { BUCKET_NAME_ENV, DEFAULT_RESERVE_MS, QUEUE_URL_ENV, TABLE_NAME_ENV } from '../settings.ts';
import { MISSING_RESOURCE_FIX, missingResource, type AwsResource } from './check-resources.ts';
import { errorName } from './dynamo-errors.ts';
import { describeRefusal } from './refusal.ts';
import { delayedOfRecord, stepReceiveCount } from './sqs-delay.ts';
import type { SqsRunQueue } from './sqs-run-queue.ts';
import type { WaitServices } from '../waits/services.ts';

export interface SqsWorkerHandlerOptions {
  runtime: { store: CheckpointStore; blobs: BlobStore; ledger: IdempotencyLedger; queue: SqsRunQueue };
  agent: AgentDefinition;
  model: Model;
  log: Logger;
  codeVersion: string;
  clock?: Clock;
  maxReceives?: number;
  /**
   * Time kept back from the Lambda's remaining time, for writing the step's outcome after the model gives
   * up: the model call is aborted this long before the invocation would be killed (default 15 s).
   */
  reserveMs?: number;
  /** Emails, links, kept events and timer limits for waiting runs (awsWaitServices). */
  waits?: WaitServices;
  /** Crash injection for tests (see EngineDeps.probe). */
  probe?: (point: CrashPoint, at: { runId: string; step: number }) => void | Promise<void>;
  /** Sees what each record's delivery came to (the entry point turns it into metrics). */
  onHandled?: (handled: Handled) => void;
}

export type SqsWorkerHandler = (
  event: SQSEvent,
  context: Pick<Context, 'awsRequestId'> & Partial<Pick<Context, 'getRemainingTimeInMillis'>>,
) => Promise<SQSBatchResponse>;

export { DEFAULT_RESERVE_MS };

/**
 * The SQS-triggered Lambda: each record advances its run by one step (handleDelivery) and the handler
 * answers with a partial batch response, so only the records that must be retried come back. The
 * Lambda request id is the worker id in every checkpoint and log line.
 *
 * Records of one message group (one run) are handled in order and, once one of them is to be retried,
 * the later ones are returned with it: a FIFO queue must not deliver them out of order. They are made
 * visible again at once rather than left in flight for the queue's whole visibility timeout; SQS still
 * delivers them only after the failed one, which holds its group while it is hidden. Different runs in a
 * batch proceed in parallel.
 */
export function createSqsWorkerHandler(options: SqsWorkerHandlerOptions): SqsWorkerHandler {
  return async (event, context) => {
    const workerId = context.awsRequestId;
    // Bound once, for the lines that do not name it; the engine's lines that do are not written with it twice.
    const log = withFields(options.log, { workerId });
    // The model's retries (and a retry-after it obeys) must end while there is still time to record the
    // failed attempt; otherwise Lambda kills the invocation and the attempt is never counted.
    const remainingMs = context.getRemainingTimeInMillis?.();
    const signal = remainingMs === undefined ? undefined : AbortSignal.timeout(Math.max(1000, remainingMs - (options.reserveMs ?? DEFAULT_RESERVE_MS)));
    const deps: EngineDeps = {
      ...options.runtime, model: options.model, agent: options.agent, clock: options.clock ?? systemClock,
      workerId, codeVersion: options.codeVersion, log, ...(options.probe ? { probe: options.probe } : {}),
      ...(signal ? { signal } : {}), ...(options.waits ? { waits: options.waits } : {}),
    };
    const failures: string[] = [];
    await Promise.all([...byMessageGroup(event.Records).values()].map(async (records) => {
      let blocked = false;
      for (const record of records) {
        if (blocked) await hideQuietly(deps, options.runtime.queue, record, 0);
        if (blocked || !(await handleRecord(deps, options, record))) {
          blocked = true;
          failures.push(record.messageId);
        }
      }
    }));
    return { batchItemFailures: failures.map((itemIdentifier) => ({ itemIdentifier })) };
  };
}

/** True when the record is done (Lambda deletes it); false to have it delivered again. */
async function handleRecord(deps: EngineDeps, options: SqsWorkerHandlerOptions, record: SQSRecord): Promise<boolean> {
  const queue = options.runtime.queue;
  const receiveCount = Number(record.attributes.ApproximateReceiveCount ?? 1);
  const delayed = delayedOfRecord(record);
  const waitMs = queue.remainingDelayMs(delayed);
  if (waitMs > 0) {
    // A retry with backoff that arrived early: hide it again until it is due (FIFO has no message delay).
    await hideQuietly(deps, queue, record, waitMs);
    return false;
  }
  try {
    const delivery = { body: record.body, receiveCount: stepReceiveCount(delayed) };
    const handled = await handleDelivery(deps, delivery, options.maxReceives !== undefined ? { maxReceives: options.maxReceives } : {});
    options.onHandled?.(handled);
    if (handled.action === 'ack') return true;
    await hideQuietly(deps, queue, record, handled.delayMs);
    return false;
  } catch (error) {
    // The step's checkpoint may be written but the next message was not sent (or a crash probe fired):
    // the redelivery finds the run moved on and re-drives its latest version.
    const line = { event: 'delivery-error', messageId: record.messageId, ...runOf(record), receiveCount, error: errorMessage(error) };
    const fix = refusalOf(error);
    if (!fix) deps.log.error(line, 'message not finished; it will be delivered again');
    // One no retry mends (the role's policy, a KMS key, a resource the environment names wrongly) was logged
    // as a passing fault, in AWS's words, which may name neither the service nor the resource.
    else deps.log.error({ ...line, errorName: errorName(error), refused: fix.refused }, `message not finished: ${fix.fix}; `
      + 'it is delivered again until the dead-letter queue takes it, and the sweeper re-drives its run once this is mended');
    await hideQuietly(deps, queue, record, retryDelayMs(Math.min(receiveCount, 6)));
    return false;
  }
}

/** The environment's variable naming each resource a Lambda function uses. */
const RESOURCE_ENV: Record<AwsResource, string> = { table: TABLE_NAME_ENV, queue: QUEUE_URL_ENV, bucket: BUCKET_NAME_ENV };

/**
 * What AWS refused for good, and what to do: undefined for a fault that may pass (a throttle, a timeout, a
 * crash). The CLI's worker reads the same refusals (describeRefusal); a resource the environment names
 * wrongly is the function's own.
 */
function refusalOf(error: unknown): { refused: string; fix: string } | undefined {
  const described = describeRefusal(error);
  if (described) return described;
  const missing = missingResource(error);
  if (!missing) return undefined;
  return { refused: `no-${missing}`, fix: `the ${missing} ${RESOURCE_ENV[missing]} names does not exist in this function's region: ${MISSING_RESOURCE_FIX}, or correct ${RESOURCE_ENV[missing]}` };
}

async function hideQuietly(deps: EngineDeps, queue: SqsRunQueue, record: SQSRecord, delayMs: number): Promise<void> {
  try {
    await queue.hide(record.receiptHandle, delayMs);
  } catch (error) {
    // The message still comes back, after the queue's visibility timeout instead.
    deps.log.warn({ event: 'visibility-error', messageId: record.messageId, ...runOf(record), error: errorMessage(error) }, 'could not set the retry delay');
  }
}

/**
 * The run a record is for, as its body says: the message id alone, which no other line logs, does not
 * tell an operator which run a failed delivery held up.
 */
function runOf(record: SQSRecord): { runId?: string; version?: number } {
  const parsed = parseMessage(record.body);
  return parsed.success ? { runId: parsed.data.runId, version: parsed.data.version } : {};
}

function byMessageGroup(records: SQSRecord[]): Map<string, SQSRecord[]> {
  const groups = new Map<string, SQSRecord[]>();
  for (const record of records) {
    const group = record.attributes.MessageGroupId ?? record.messageId;
    groups.set(group, [...(groups.get(group) ?? []), record]);
  }
  return groups;
}
