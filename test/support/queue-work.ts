import type { EngineDeps } from '../../lib/engine/deps.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import type { LocalRuntime } from '../../lib/local/runtime.ts';
import { VISIBILITY_MS } from './harness.ts';

/**
 * Works every message that is visible now, like a worker loop, and returns when none is: unlike drain(),
 * it never moves the clock, so a waiting run's timer message stays where it is until the test moves time.
 */
export async function workVisible(deps: EngineDeps, runtime: LocalRuntime, max = 200): Promise<number> {
  let handled = 0;
  for (; handled < max; handled++) {
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    if (!delivery) return handled;
    try {
      const result = await handleDelivery(deps, delivery);
      if (result.action === 'ack') { if (!result.acked) await runtime.queue.ack(delivery); }
      else await runtime.queue.release(delivery, result.delayMs);
    } catch (error) {
      // As the worker loop does: the message comes back after a short delay.
      await runtime.queue.release(delivery, 1000);
      throw error;
    }
  }
  throw new Error(`still messages after ${max}`);
}
