import type { RunQueueConsumer } from '../ports.ts';
import type { EngineDeps } from './deps.ts';
import { errorMessage } from '../core/errors.ts';
import { handleDelivery, retryDelayMs, type Handled } from './handle-message.ts';

export interface WorkerOptions {
  visibilityMs?: number;
  waitMs?: number;
  maxReceives?: number;
  signal?: AbortSignal;
  /** Return when no message arrived for this long (a worker that drains the queue, then exits). */
  idleExitMs?: number;
  /** Called after each message; return true to stop the loop. */
  onHandled?: (handled: Handled) => boolean | void;
}

/**
 * Pulls messages and advances one step per message until the signal aborts. A heartbeat keeps a slow
 * step's message hidden from other workers; if this process dies, the message reappears after the
 * visibility timeout and another worker resumes from the last checkpoint.
 */
export async function runWorker(deps: EngineDeps, consumer: RunQueueConsumer, options: WorkerOptions = {}): Promise<void> {
  const visibilityMs = options.visibilityMs ?? 30_000;
  let lastActivity = Date.now();
  while (!options.signal?.aborted) {
    const deliveries = await consumer.receive({ waitMs: options.waitMs ?? 1000, visibilityMs });
    if (deliveries.length) lastActivity = Date.now();
    else if (options.idleExitMs !== undefined && Date.now() - lastActivity >= options.idleExitMs) return;
    for (const delivery of deliveries) {
      const heartbeat = setInterval(() => {
        consumer.release(delivery, visibilityMs).catch((error) => deps.log.warn({ error: String(error) }, 'heartbeat failed'));
      }, Math.max(50, visibilityMs / 3));
      let handled: Handled;
      try {
        handled = await handleDelivery(deps, delivery, options.maxReceives !== undefined ? { maxReceives: options.maxReceives } : {});
      } catch (error) {
        deps.log.error({ event: 'step-error', workerId: deps.workerId, error: errorMessage(error), body: delivery.body }, 'step did not finish; the message will be delivered again');
        handled = { action: 'release', delayMs: retryDelayMs(Math.min(delivery.receiveCount, 6)) };
      } finally {
        clearInterval(heartbeat);
      }
      if (handled.action === 'ack') await consumer.ack(delivery);
      else await consumer.release(delivery, handled.delayMs);
      if (options.onHandled?.(handled)) return;
    }
  }
}
