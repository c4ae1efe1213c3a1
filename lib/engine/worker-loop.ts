import type { Delivery, RunQueueConsumer } from '../ports.ts';
import type { EngineDeps } from './deps.ts';
import { errorMessage } from '../core/errors.ts';
import { handleDelivery, retryDelayMs, type Handled } from './handle-message.ts';
import { sweepStalledRuns } from './sweep.ts';

/** A running run with no checkpoint and no live message for this long is re-driven by a worker loop. */
export const DEFAULT_STALL_MS = 60_000;
/** How often a worker loop looks for such runs, give or take a fifth so that workers spread out. */
export const DEFAULT_SWEEP_EVERY_MS = 30_000;

export interface WorkerOptions {
  visibilityMs?: number;
  waitMs?: number;
  maxReceives?: number;
  signal?: AbortSignal;
  /** Return when no message arrived for this long (a worker that drains the queue, then exits). */
  idleExitMs?: number;
  /** Called after each message; return true to stop the loop. */
  onHandled?: (handled: Handled) => boolean | void;
  /** Re-drive running runs with no checkpoint and no live message for this long (default 60 s). */
  stallMs?: number;
  /** Look for them this often, ±20% (default 30 s; 0: never). Only queues that can see the runs (local). */
  sweepEveryMs?: number;
}

/**
 * Pulls messages and advances one step per message until the signal aborts. A heartbeat keeps a slow
 * step's message hidden from other workers; if this process dies, the message reappears after the
 * visibility timeout and another worker resumes from the last checkpoint. On a queue that can see the
 * runs, the loop also re-drives runs left running with nothing to move them: at start, then every ~30 s
 * (one indexed query when there is nothing to do).
 *
 * On a queue in the checkpoints' database (receiveInCommit), a step's checkpoint also receives this
 * worker's next message, FIFO as a receive would: a busy worker then makes no receive of its own, one
 * write transaction per step. A message so received and not started when the loop stops is handed back.
 */
export async function runWorker(deps: EngineDeps, consumer: RunQueueConsumer, options: WorkerOptions = {}): Promise<void> {
  const visibilityMs = options.visibilityMs ?? 30_000;
  const sweepEveryMs = options.sweepEveryMs ?? DEFAULT_SWEEP_EVERY_MS;
  const stalled = sweepEveryMs > 0 ? consumer.stalledRuns?.bind(consumer) : undefined;
  // Only with a way to give back what a last step received: a worker stopping must not sit on it.
  const receive = consumer.handBack ? consumer.receiveInCommit?.(visibilityMs) : undefined;
  let nextSweepAt = deps.clock.now();
  let lastActivity = Date.now();
  /** Received for this worker and not started yet: the next step's delivery, or the rest of a batch. */
  let held: Delivery[] = [];
  /** The delivery whose step is in progress, for the heartbeat. */
  let current: Delivery | undefined;
  // One heartbeat for the loop's life, not a timer armed and cleared each step: that cost 10 us of a
  // 100 us step (fsync off). A tick renews the step in progress, if any, so a step's delivery is renewed
  // within a third of the visibility of its start and every third after, however long the step runs.
  const heartbeat = setInterval(() => {
    if (current) consumer.release(current, visibilityMs).catch((error: unknown) => deps.log.warn({ event: 'heartbeat-failed', error: errorMessage(error) }, 'heartbeat failed'));
  }, Math.max(50, visibilityMs / 3));
  try {
    while (!options.signal?.aborted) {
      if (stalled && deps.clock.now() >= nextSweepAt) {
        nextSweepAt = deps.clock.now() + sweepEveryMs * (0.8 + 0.4 * Math.random());
        await sweepStalledRuns({ store: deps.store, queue: deps.queue, clock: deps.clock, log: deps.log, stalled }, { stallMs: options.stallMs ?? DEFAULT_STALL_MS })
          .catch((error: unknown) => deps.log.warn({ event: 'sweep-failed', error: errorMessage(error) }, 'stalled-run sweep failed; the next one retries'));
      }
      if (!held.length) held = await consumer.receive({ waitMs: options.waitMs ?? 1000, visibilityMs });
      const delivery = held.shift();
      if (!delivery) {
        if (options.idleExitMs !== undefined && Date.now() - lastActivity >= options.idleExitMs) return;
        continue;
      }
      lastActivity = Date.now();
      current = delivery;
      let handled: Handled;
      try {
        // One delivery in hand at a time: the rest of a batch comes first.
        handled = await handleDelivery(deps, delivery, { maxReceives: options.maxReceives, receive: held.length ? undefined : receive });
      } catch (error) {
        deps.log.error({ event: 'step-error', workerId: deps.workerId, error: errorMessage(error), body: delivery.body }, 'step did not finish; the message will be delivered again');
        handled = { action: 'release', delayMs: retryDelayMs(Math.min(delivery.receiveCount, 6)) };
      } finally {
        current = undefined;
      }
      if (handled.action === 'ack') {
        if (handled.next) held.push(...handled.next);
        // A step whose checkpoint acked its delivery (the queue in the store's database) needs no second write.
        if (!handled.acked) await consumer.ack(delivery);
      } else await consumer.release(delivery, handled.delayMs);
      if (options.onHandled?.(handled)) return;
    }
  } finally {
    clearInterval(heartbeat);
    // Not started, so not a try of its step: another worker takes it now, and its step counts no restart.
    for (const delivery of held) {
      await (consumer.handBack ? consumer.handBack(delivery) : consumer.release(delivery, 0))
        .catch((error: unknown) => deps.log.warn({ event: 'hand-back-failed', error: errorMessage(error) }, 'a received message was not handed back: it comes back after its visibility timeout'));
    }
  }
}
