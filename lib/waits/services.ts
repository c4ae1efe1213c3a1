import type { EventBuffer, Notifier } from '../ports.ts';
import type { SigningKeySource } from './signing-key.ts';

/** What waits need besides the engine's ports. Each is optional: a missing one is logged, not a crash. */
export interface WaitServices {
  /** Sends approval emails. */
  notifier?: Notifier;
  /** Signs approval links. */
  signingKey?: SigningKeySource;
  /** Where approval links point: `${publicUrl}/approvals/<token>` (stepwise serve, or the API Gateway URL). */
  publicUrl?: string;
  /** Keeps events, so one that arrives before its wait begins is still matched. */
  events?: EventBuffer;
  /** How long before a wait began an event still counts for it (default 1 hour). */
  earlyEventMs?: number;
  /**
   * The longest delay the run queue holds a timer message for. Locally unbounded (the queue's visible_at);
   * on SQS FIFO short, and the scheduled sweeper sends the timers of longer waits when they come due.
   */
  maxTimerMs?: number;
}

export const DEFAULT_EARLY_EVENT_MS = 3600 * 1000;
