import { errorMessage } from '../core/errors.ts';
import type { Logger } from '../log.ts';
import { DEFAULT_TIMER_LOOKAHEAD_MS } from '../settings.ts';
import type { CheckpointStore, Clock, OpenWait, RunQueue } from '../ports.ts';

/** DEFAULT_TIMER_LOOKAHEAD_MS: how far ahead the sweeper looks; a timer sent this early waits in the queue at most this long. */
export { DEFAULT_TIMER_LOOKAHEAD_MS };

/**
 * Sends the timer message of every wait whose deadline comes within `lookaheadMs`, for queues that cannot
 * hold a message for days (SQS). Run by the scheduled sweeper; nothing of a long wait sits in the queue
 * until then. Sending twice is harmless: the queue deduplicates within its window, and a timer that finds
 * its wait already answered changes nothing.
 */
export async function sendDueTimers(
  deps: { store: CheckpointStore; queue: RunQueue; clock: Clock; log: Logger },
  options: { lookaheadMs?: number; limit?: number; agents?: readonly string[] } = {},
): Promise<OpenWait[]> {
  const now = deps.clock.now();
  // Agents that share a table each have their own queue: a timer goes to its own agent's. The store takes
  // only theirs, so other agents' due waits (a backlog on their queue) never fill the sweep's `limit`.
  const due = await deps.store.dueWaits(now + (options.lookaheadMs ?? DEFAULT_TIMER_LOOKAHEAD_MS), options.limit ?? 500, options.agents);
  const sent: OpenWait[] = [];
  for (const wait of due) {
    try {
      await deps.queue.send({ runId: wait.runId, version: wait.version }, { delayMs: Math.max(0, wait.deadline - now), timer: true });
      sent.push(wait);
    } catch (error) {
      deps.log.error({ event: 'timer-send-failed', runId: wait.runId, waitId: wait.waitId, error: errorMessage(error) }, 'could not send a wait timer; the next sweep retries');
    }
  }
  if (sent.length) deps.log.info({ event: 'timers-sent', count: sent.length }, 'wait timers sent');
  return sent;
}
