import { describe, expect, it } from 'vitest';
import { remainingDelayMs, stepReceiveCount } from '../../lib/aws/sqs-delay.ts';

const HOUR = 3_600_000;
// SQS's clock: sent at 1,000,000, received first 200 ms later.
const sentAt = 1_000_000;
const backoff = (delayMs: number, senderAhead: number, receive: { count?: number; firstAfter?: number } = {}) => ({
  notBefore: String(sentAt + senderAhead + delayMs),
  delayMs: String(delayMs),
  sentAt: String(sentAt),
  firstReceiveAt: String(sentAt + (receive.firstAfter ?? 200)),
  receiveCount: String(receive.count ?? 1),
});

describe('a delayed SQS message, read on the receiver\'s clock and the queue\'s', () => {
  it('a backoff from a sender an hour ahead is hidden for what is left of its delay by the queue\'s clock, not an hour more', () => {
    // The receiver's clock agrees with the queue's; the sender's ran an hour ahead.
    expect(remainingDelayMs(backoff(2_000, HOUR), sentAt + 200)).toBe(1_800);
  });

  it('a backoff is taken on the later receive that follows the early one\'s hide, whatever the receiver\'s clock says', () => {
    expect(remainingDelayMs(backoff(2_000, HOUR, { count: 2 }), sentAt + 2_100)).toBe(0);
    // First received once due by the queue's clock: due at once.
    expect(remainingDelayMs(backoff(2_000, HOUR, { firstAfter: 2_500 }), sentAt + 2_500)).toBe(0);
  });

  it('a receiver whose clock runs ahead takes a backoff when its clock says, as before (the step\'s version check makes it harmless)', () => {
    expect(remainingDelayMs(backoff(2_000, 0), sentAt + 2_000)).toBe(0);
    expect(remainingDelayMs(backoff(2_000, 0), sentAt + 1_500)).toBe(500);
  });

  it('a timer (no delay carried) and a message from older code are hidden by the receiver\'s clock alone', () => {
    const timer = { ...backoff(2_000, HOUR), delayMs: undefined };
    expect(remainingDelayMs(timer, sentAt + 200)).toBe(HOUR + 1_800);
    expect(remainingDelayMs({ ...timer, receiveCount: '2' }, sentAt + 2_100)).toBe(HOUR - 100);
    expect(remainingDelayMs({ notBefore: 'not a number', delayMs: '5' }, 0)).toBe(0);
    expect(remainingDelayMs({}, 0)).toBe(0);
    // A delay that is no number is not believed: the receiver's clock decides.
    expect(remainingDelayMs({ ...backoff(2_000, HOUR), delayMs: 'soon' }, sentAt + 200)).toBe(HOUR + 1_800);
  });

  it('counts the early first receive of a backoff out of the step\'s receive count, on the queue\'s clock where it can', () => {
    // Early by the queue's clock (200 ms after the send, due 2 s after it), though the sender's clock ran an hour ahead.
    expect(stepReceiveCount(backoff(2_000, HOUR, { count: 2 }))).toBe(1);
    // First received when due: that receive was a delivery, and this one a restart.
    expect(stepReceiveCount(backoff(2_000, HOUR, { count: 2, firstAfter: 2_000 }))).toBe(2);
    // Without the delay carried, the sender's notBefore decides.
    expect(stepReceiveCount({ ...backoff(2_000, 0, { count: 2 }), delayMs: undefined })).toBe(1);
    expect(stepReceiveCount({ receiveCount: '3' })).toBe(3);
  });
});
