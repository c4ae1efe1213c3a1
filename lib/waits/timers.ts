import { errorMessage } from '../core/errors.ts';
import type { Logger } from '../log.ts';
import { DEFAULT_TIMER_LOOKAHEAD_MS } from '../settings.ts';
import type { CheckpointStore, Clock, OpenWait, RunQueue, WaitPosition } from '../ports.ts';

/** DEFAULT_TIMER_LOOKAHEAD_MS: how far ahead the sweeper looks; a timer sent this early waits in the queue at most this long. */
export { DEFAULT_TIMER_LOOKAHEAD_MS };

/** Timers one sweep sends at once: a fan-out of thousands due together fits in the sweeper's run. */
const SEND_CONCURRENCY = 16;

/**
 * Sends the timer message of every wait whose deadline comes within `lookaheadMs`, for queues that cannot
 * hold a message for days (SQS). Run by the scheduled sweeper; nothing of a long wait sits in the queue
 * until then. Sending twice is harmless: the queue deduplicates within its window, and a timer that finds
 * its wait already answered changes nothing.
 *
 * `limit` is a page of the store's due waits, not all a sweep sends: the waits already sent stay open (and
 * first) until their deadline, so a sweep that sent one page only sent the same earliest waits again each
 * time, and of more runs sleeping until one instant than a page holds, the rest got their timers a sweep
 * after the first page's had fired, a page per sweep interval (or never, behind a page of waits no timer
 * can close, such as runs of newer code).
 */
export async function sendDueTimers(
  deps: { store: CheckpointStore; queue: RunQueue; clock: Clock; log: Logger },
  options: { lookaheadMs?: number; limit?: number; agents?: readonly string[]; onFailed?: (wait: OpenWait) => void } = {},
): Promise<OpenWait[]> {
  const now = deps.clock.now();
  const before = now + (options.lookaheadMs ?? DEFAULT_TIMER_LOOKAHEAD_MS);
  const limit = options.limit ?? 500;
  const sent: OpenWait[] = [];
  let after: WaitPosition | undefined;
  for (;;) {
    // Agents that share a table each have their own queue: a timer goes to its own agent's. The store takes
    // only theirs, so other agents' due waits (a backlog on their queue) never fill the sweep's page.
    const due = await deps.store.dueWaits(before, limit, options.agents, after);
    for (let i = 0; i < due.length; i += SEND_CONCURRENCY) {
      await Promise.all(due.slice(i, i + SEND_CONCURRENCY).map(async (wait) => {
        try {
          await deps.queue.send({ runId: wait.runId, version: wait.version }, { delayMs: Math.max(0, wait.deadline - now), timer: true });
          sent.push(wait);
        } catch (error) {
          deps.log.error({ event: 'timer-send-failed', runId: wait.runId, waitId: wait.waitId, error: errorMessage(error) }, 'could not send a wait timer; the next sweep retries');
          options.onFailed?.(wait);
        }
      }));
    }
    const last = due[due.length - 1];
    if (due.length < limit || !last) break;
    after = { deadline: last.deadline, runId: last.runId };
  }
  if (sent.length) deps.log.info({ event: 'timers-sent', count: sent.length }, 'wait timers sent');
  return sent;
}
