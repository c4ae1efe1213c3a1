/**
 * A delayed message on an SQS FIFO queue, which has no per-message delay: it carries when it is due, and
 * whoever receives it early hides it again until then (lib/aws/sqs-run-queue.ts, the Lambda handler).
 *
 * "When" is read on two clocks. `notBefore` is on the sender's; a receiver whose clock runs behind the
 * sender's read a backoff of seconds as one of that many seconds more (an hour behind, an hour more), and
 * the run's step stood still that long. So a backoff also carries the delay asked for, which the queue's own
 * clock measures from the message's SentTimestamp: the receiver hides it for the shorter of the two. A
 * receive after the first follows the first receiver's hide, which lasted until the message was due by the
 * queue's clock: it is due. A receiver whose clock runs ahead still takes a message early by its own
 * clock; the step's version check makes that harmless.
 *
 * A wait's timer carries no delay: the engine checks the wait's deadline on its own clock when the timer
 * comes, so a timer taken as due by the queue's clock and not yet by the receiver's would be sent again,
 * and that send swallowed as a duplicate of the first within SQS's 5 minutes.
 */

/** Message attribute carrying "not before" (epoch ms on the sender's clock). */
export const NOT_BEFORE_ATTRIBUTE = 'notBefore';
/** Message attribute carrying a backoff's delay (ms), measured by the queue's clock from SentTimestamp. */
export const DELAY_ATTRIBUTE = 'delayMs';

/** What a receive says of a message's delay: message attributes and SQS's system attributes, as strings. */
export interface DelayedMessage {
  notBefore?: string | undefined;
  delayMs?: string | undefined;
  sentAt?: string | undefined;
  firstReceiveAt?: string | undefined;
  receiveCount?: string | undefined;
}

/** A message as ReceiveMessage returns it (the SDK's names), with the attributes a receive asks for. */
export function delayedOfMessage(message: {
  MessageAttributes?: Record<string, { StringValue?: string | undefined }> | undefined;
  Attributes?: Partial<Record<string, string>> | undefined;
}): DelayedMessage {
  return {
    notBefore: message.MessageAttributes?.[NOT_BEFORE_ATTRIBUTE]?.StringValue,
    delayMs: message.MessageAttributes?.[DELAY_ATTRIBUTE]?.StringValue,
    sentAt: message.Attributes?.SentTimestamp,
    firstReceiveAt: message.Attributes?.ApproximateFirstReceiveTimestamp,
    receiveCount: message.Attributes?.ApproximateReceiveCount,
  };
}

/** A record of a Lambda's SQS event (its own names for the same). */
export function delayedOfRecord(record: {
  messageAttributes?: Record<string, { stringValue?: string | undefined }> | undefined;
  attributes: { SentTimestamp?: string; ApproximateFirstReceiveTimestamp?: string; ApproximateReceiveCount?: string };
}): DelayedMessage {
  return {
    notBefore: record.messageAttributes?.[NOT_BEFORE_ATTRIBUTE]?.stringValue,
    delayMs: record.messageAttributes?.[DELAY_ATTRIBUTE]?.stringValue,
    sentAt: record.attributes.SentTimestamp,
    firstReceiveAt: record.attributes.ApproximateFirstReceiveTimestamp,
    receiveCount: record.attributes.ApproximateReceiveCount,
  };
}

/** How long a message must still be hidden at `now` (the receiver's clock): 0 when due or not delayed. */
export function remainingDelayMs(message: DelayedMessage, now: number): number {
  const at = Number(message.notBefore);
  const byReceiver = Number.isFinite(at) ? Math.max(0, at - now) : 0;
  if (byReceiver === 0) return 0;
  const byQueue = queueRemainingMs(message);
  return byQueue === undefined ? byReceiver : Math.min(byReceiver, byQueue);
}

/** When the message is due by the queue's clock (SentTimestamp + delay), where it carries its delay. */
function queueDueAt(message: DelayedMessage): number | undefined {
  const delay = Number(message.delayMs);
  const sent = Number(message.sentAt);
  return message.delayMs !== undefined && Number.isFinite(delay) && Number.isFinite(sent) ? sent + delay : undefined;
}

/** How long the message must still wait by the queue's clock; undefined where that clock cannot say. */
function queueRemainingMs(message: DelayedMessage): number | undefined {
  const due = queueDueAt(message);
  if (due === undefined) return undefined;
  // A later receive comes after the first receiver's hide, or after a step that took it as due. Not
  // always: a record a Lambda batch hands back at once, behind a failed one of its run (FIFO order), or
  // one whose hide was refused, comes again before it is due, and is then taken a backoff early, as by a
  // receiver whose clock runs ahead (harmless: the step's version check).
  if (Number(message.receiveCount ?? 1) > 1) return 0;
  // The first receive is now, by the queue's clock.
  const first = Number(message.firstReceiveAt);
  return Number.isFinite(first) ? Math.max(0, due - first) : undefined;
}

/** A first receive this long before the message was due was early: it was hidden again, not handed to the engine. */
const EARLY_RECEIVE_MARGIN_MS = 500;

/**
 * The receive count to hand to the engine, which counts a delivery above 1 as a restart of the step. SQS
 * also counts the early receive of a delayed message, which was only hidden again until it was due; when
 * the first receive came clearly before that, it is taken off (the hide lasts until then, so there is
 * usually no second early receive). Off by one at most, and then too high, never too low. Both times are
 * the queue's where the message carries its delay; else the due time is the sender's notBefore.
 */
export function stepReceiveCount(message: DelayedMessage): number {
  const count = Number(message.receiveCount ?? 1);
  const first = Number(message.firstReceiveAt);
  const due = queueDueAt(message) ?? Number(message.notBefore);
  if (count <= 1 || !Number.isFinite(first) || !Number.isFinite(due)) return count;
  return first < due - EARLY_RECEIVE_MARGIN_MS ? count - 1 : count;
}
