import { createHash } from 'node:crypto';
import {
  ChangeMessageVisibilityCommand, DeleteMessageCommand, ReceiveMessageCommand, SendMessageCommand, type SQSClient,
} from '@aws-sdk/client-sqs';
import { InvalidInputError } from '../core/errors.ts';
import type { Clock, Delivery, ReceiveOptions, RedriveOptions, RunMessage, RunQueue, RunQueueConsumer, SendOptions } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { errorName } from './dynamo-errors.ts';
import { DELAY_ATTRIBUTE, NOT_BEFORE_ATTRIBUTE, delayedOfMessage, remainingDelayMs, stepReceiveCount, type DelayedMessage } from './sqs-delay.ts';

/** A long poll's request may take its wait plus this: the clients' requestTimeout (10 s) would cut a 20 s poll. */
const LONG_POLL_MARGIN_MS = 10_000;

export const DEFAULT_VISIBILITY_MS = 30_000;
const MAX_VISIBILITY_SECONDS = 12 * 3600;
const MAX_DEDUPLICATION_ID = 128;
/** SQS refuses a longer MessageGroupId (InvalidParameterValue); fauxqs takes any length. */
const MAX_GROUP_ID = 128;
/** What SQS answers for a receipt that expired, was used by a later receive, or whose message is gone. */
const STALE_RECEIPT_ERRORS = new Set(['ReceiptHandleIsInvalid', 'InvalidParameterValue', 'InvalidParameterValueException', 'MessageNotInflight']);

/**
 * SQS hides a message for 12 hours at most. Asked for longer, it was cut to 12 while the worker's
 * heartbeat, timed from the longer one, came too late: a second worker took the step it was running.
 * `stepwise worker` checks it before it says it is ready, as a receive does.
 */
export function assertSqsVisibility(visibilityMs: number): void {
  if (visibilityMs > MAX_VISIBILITY_SECONDS * 1000) {
    throw new InvalidInputError(`a visibility timeout on SQS is at most 12 hours (${MAX_VISIBILITY_SECONDS * 1000} ms), not ${visibilityMs} ms`);
  }
}

export interface SqsRunQueueOptions {
  sqs: SQSClient;
  /** A FIFO queue (its URL ends in .fifo). */
  queueUrl: string;
  clock?: Clock;
}

/**
 * The run queue on SQS FIFO. MessageGroupId = run id: one run's messages are delivered one at a time, in
 * order, so two workers never spend a model call on the same step at once, while different runs proceed in
 * parallel. MessageDeduplicationId = run/version: sending the message for a version twice within SQS's
 * 5-minute deduplication window (a stale or duplicate delivery re-driving the latest, crash C7/C8)
 * enqueues it once. A copy sent after the window is a second message, which the engine's version check
 * makes harmless: it finds the run moved on and stops.
 *
 * FIFO queues have no per-message DelaySeconds, and the engine sends retry backoff as a delay. A delayed
 * message says when it is due instead (lib/aws/sqs-delay.ts); whoever receives it early (this consumer, or
 * the Lambda handler) hides it again until then with ChangeMessageVisibility, which also holds back only
 * that run's group.
 */
export class SqsRunQueue implements RunQueue, RunQueueConsumer {
  constructor(private readonly options: SqsRunQueueOptions) {
    if (!options.queueUrl.endsWith('.fifo')) {
      throw new InvalidInputError(`${options.queueUrl} is not a FIFO queue: stepwise needs per-run ordering and deduplication (create it with ensureQueue)`);
    }
  }

  get queueUrl(): string {
    return this.options.queueUrl;
  }

  private get now(): number {
    return (this.options.clock ?? systemClock).now();
  }

  async send(message: RunMessage, options: SendOptions = {}): Promise<void> {
    // A timer goes in a group of its own: hidden until due, it must not hold back the run's steps.
    const timer = options.timer === true;
    await this.sendMessage(message, deduplicationId(message, timer ? 'timer' : undefined), options.delayMs ?? 0, timer ? timerGroupId(message.runId) : message.runId, !timer);
  }

  /**
   * Sends a run's message again on purpose. SQS cannot say whether the run still has a message, so without
   * a token this is a plain send: deduplicated against a send of the same version in the last 5 minutes,
   * delivered after that. With a token (the sweeper: one per sweep window) it gets past the deduplication
   * of the earlier send, which may be the message that was lost; the same token within 5 minutes adds no copy.
   */
  async redrive(message: RunMessage, options: RedriveOptions = {}): Promise<boolean> {
    await this.sendMessage(message, deduplicationId(message, options.token), 0, message.runId);
    return true;
  }

  async receive(options: ReceiveOptions = {}): Promise<Delivery[]> {
    if (options.visibilityMs !== undefined) assertSqsVisibility(options.visibilityMs);
    const waitSeconds = Math.min(20, Math.ceil((options.waitMs ?? 0) / 1000));
    const signal = options.signal;
    if (signal?.aborted) return [];
    let received;
    try {
      received = await this.options.sqs.send(new ReceiveMessageCommand({
        QueueUrl: this.options.queueUrl,
        MaxNumberOfMessages: Math.min(10, Math.max(1, options.max ?? 1)),
        WaitTimeSeconds: waitSeconds,
        VisibilityTimeout: seconds(options.visibilityMs ?? DEFAULT_VISIBILITY_MS),
        MessageSystemAttributeNames: ['ApproximateReceiveCount', 'ApproximateFirstReceiveTimestamp', 'SentTimestamp'],
        MessageAttributeNames: [NOT_BEFORE_ATTRIBUTE, DELAY_ATTRIBUTE],
      }), { requestTimeout: waitSeconds * 1000 + LONG_POLL_MARGIN_MS, ...(signal ? { abortSignal: signal } : {}) });
    } catch (error) {
      // The worker stopping (or its next sweep) cut the long poll, which held a SIGTERM'd `stepwise worker`
      // up to 20 s. A message SQS handed out in the instant of the cut stays hidden for its visibility
      // timeout and is then delivered again, as any delivery not acked is.
      if (signal?.aborted) return [];
      throw error;
    }
    const deliveries: Delivery[] = [];
    for (const message of received.Messages ?? []) {
      if (!message.ReceiptHandle) continue;
      const delayed = delayedOfMessage(message);
      const waitMs = this.remainingDelayMs(delayed);
      if (waitMs > 0) {
        await this.hide(message.ReceiptHandle, waitMs);
        continue;
      }
      deliveries.push({ body: message.Body ?? '', receiveCount: stepReceiveCount(delayed), receipt: message.ReceiptHandle });
    }
    return deliveries;
  }

  async ack(delivery: Delivery): Promise<boolean> {
    try {
      await this.options.sqs.send(new DeleteMessageCommand({ QueueUrl: this.options.queueUrl, ReceiptHandle: delivery.receipt }));
      return true;
    } catch (error) {
      if (STALE_RECEIPT_ERRORS.has(errorName(error))) return false;
      throw error;
    }
  }

  async release(delivery: Delivery, delayMs: number): Promise<void> {
    await this.hide(delivery.receipt, delayMs);
  }

  /** How long a received message must still be hidden, on this queue's clock and SQS's (0 when due or not delayed). */
  remainingDelayMs(message: DelayedMessage): number {
    return remainingDelayMs(message, this.now);
  }

  /** Makes a received message visible again after delayMs. A receipt that is no longer ours is ignored. */
  async hide(receipt: string, delayMs: number): Promise<void> {
    try {
      await this.options.sqs.send(new ChangeMessageVisibilityCommand({
        QueueUrl: this.options.queueUrl, ReceiptHandle: receipt, VisibilityTimeout: seconds(delayMs),
      }));
    } catch (error) {
      if (!STALE_RECEIPT_ERRORS.has(errorName(error))) throw error;
    }
  }

  /** `backoff`: the delay is carried too, for SQS's clock to measure (lib/aws/sqs-delay.ts); a timer's is not. */
  private async sendMessage(message: RunMessage, deduplication: string, delayMs: number, group: string, backoff = false): Promise<void> {
    await this.options.sqs.send(new SendMessageCommand({
      QueueUrl: this.options.queueUrl,
      // Exactly the engine's message: its parser refuses anything else.
      MessageBody: JSON.stringify({ runId: message.runId, version: message.version }),
      MessageGroupId: group,
      MessageDeduplicationId: deduplication,
      ...(delayMs > 0 ? { MessageAttributes: delayAttributes(this.now, delayMs, backoff) } : {}),
    }));
  }
}

export function deduplicationId(message: RunMessage, token?: string): string {
  const id = `${message.runId}/v${message.version}${token ? `/${token}` : ''}`;
  return id.length <= MAX_DEDUPLICATION_ID ? id : createHash('sha256').update(id).digest('hex');
}

/**
 * A run's timers' group, not its steps' (run ids are at most 128 characters, the group id's limit): a run
 * id too long for the suffix is hashed, so a wait of a 128-character run id (a fork of a long one gets
 * one) can still send its timer, where SQS refused every send and the wait never reached its deadline.
 * No run id has a `~`, so neither form is ever another run's group.
 */
function timerGroupId(runId: string): string {
  const group = `${runId}~timer`;
  return group.length <= MAX_GROUP_ID ? group : `timer~${createHash('sha256').update(runId).digest('hex')}`;
}

function seconds(ms: number): number {
  return Math.min(MAX_VISIBILITY_SECONDS, Math.max(0, Math.ceil(ms / 1000)));
}

function delayAttributes(now: number, delayMs: number, backoff: boolean): Record<string, { DataType: string; StringValue: string }> {
  const attributes = { [NOT_BEFORE_ATTRIBUTE]: { DataType: 'Number', StringValue: String(now + delayMs) } };
  return backoff ? { ...attributes, [DELAY_ATTRIBUTE]: { DataType: 'Number', StringValue: String(Math.ceil(delayMs)) } } : attributes;
}
