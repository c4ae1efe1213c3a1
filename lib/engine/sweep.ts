import { errorMessage } from '../core/errors.ts';
import type { Logger } from '../log.ts';
import type { RunPosition } from '../core/run-order.ts';
import type { CheckpointStore, Clock, RunMessage, RunQueue, RunSummary } from '../ports.ts';
import { sendDueTimers } from '../waits/timers.ts';

/** How far machines' clocks kept by NTP may differ: a checkpoint stamped further ahead was written by a clock ahead. */
const CLOCK_SKEW_MS = 1_000;

export interface SweepDeps {
  store: Pick<CheckpointStore, 'list'>;
  queue: Pick<RunQueue, 'redrive'>;
  clock: Clock;
  log: Logger;
  /**
   * Where the candidates come from. By default the store's running runs with no checkpoint since
   * `before`; a queue that can see the runs (the local one) also leaves out those with a live message.
   */
  stalled?: (before: number, limit: number) => Promise<RunSummary[]>;
}

export interface SweepOptions {
  /** A running run whose latest checkpoint is older than this may have lost its message. */
  stallMs: number;
  /** Runs re-driven per sweep at most; the next sweep takes the rest. */
  limit?: number;
  /**
   * Only runs of these agents (an agent's name and former names). Several agents can share a table, each
   * with its own queue and worker: a sweeper must put back only its own agent's runs, on its own queue.
   */
  agents?: readonly string[];
}

/**
 * The supervisor for lost work, shared by the AWS sweeper (functions/sweeper.ts, on a schedule) and the
 * local worker loop. A running run always has a message on its way, except when the message went to the
 * dead-letter queue, the enqueue after its checkpoint failed, or the message was consumed without a
 * successor; such a run would wait forever. Re-driving the message for its latest version is always safe:
 * if the original still exists, one of the two finds the run moved on and stops (a stale message is a no-op).
 */
export async function sweepStalledRuns(deps: SweepDeps, options: SweepOptions): Promise<RunMessage[]> {
  return (await requeueStalledRuns(deps, options)).requeued;
}

/** sweepStalledRuns, with the count of runs whose message could not be sent (each logged as requeue-failed). */
async function requeueStalledRuns(deps: SweepDeps, options: SweepOptions): Promise<{ requeued: RunMessage[]; failed: number }> {
  const now = deps.clock.now();
  const before = now - options.stallMs;
  const limit = options.limit ?? 500;
  const stalled = deps.stalled
    ? await deps.stalled(before, limit)
    : await stalledRunsOf(deps.store, { updatedBefore: before }, limit, options.agents);
  // A run whose checkpoint is stamped ahead of this clock was written by a clock ahead of it (another
  // machine's, or this one's before a step back): by `before` alone it would count as stalled only once this
  // clock caught up, the skew late (hours for a clock hours ahead). Nothing tells a lost one from a moving
  // one, so each is re-driven as a stalled one is: a moving run's copy finds it moved on (on a FIFO queue,
  // behind its message), one more delivery a sweep while its worker's clock runs ahead.
  if (!deps.stalled && stalled.length < limit) {
    const ahead = await stalledRunsOf(deps.store, { updatedAfter: now + CLOCK_SKEW_MS }, limit - stalled.length, options.agents);
    // Disjoint from the first look (stamped before now - stallMs): nothing to leave out twice.
    stalled.push(...ahead);
  }
  // One token per stall window for SQS: sweeps of the same window within SQS's 5-minute deduplication
  // window add no copy; a later one that still finds the run stalled sends another, which is harmless.
  const token = `sweep-${Math.floor(now / options.stallMs)}`;
  const requeued: RunMessage[] = [];
  let failed = 0;
  for (const run of stalled) {
    if (options.agents && !options.agents.includes(run.agent)) continue;
    const message = { runId: run.runId, version: run.version };
    try {
      if (!(await deps.queue.redrive(message, { token }))) continue;
      requeued.push(message);
      deps.log.warn({ event: 'run-requeued', runId: run.runId, version: run.version, step: run.step, idleMs: now - run.updatedAt }, 'stalled run re-enqueued');
    } catch (error) {
      failed++;
      deps.log.error({ event: 'requeue-failed', runId: run.runId, version: run.version, error: errorMessage(error) }, 'could not re-enqueue a stalled run; the next sweep retries');
    }
  }
  return { requeued, failed };
}

/**
 * The store's running runs with no checkpoint since `before`, the latest first, up to `limit` of `agents`'
 * runs. Past a full page of other agents' runs it reads on: agents that share a table share its index, and
 * a backlog on another agent's queue (hundreds of its runs idle for longer than the stall window) would
 * otherwise fill every sweep's page and hide this agent's lost runs for as long as the backlog lasts.
 */
async function stalledRunsOf(
  store: Pick<CheckpointStore, 'list'>, bound: { updatedBefore: number } | { updatedAfter: number }, limit: number, agents: readonly string[] | undefined,
): Promise<RunSummary[]> {
  const own: RunSummary[] = [];
  let after: RunPosition | undefined;
  for (;;) {
    const page = await store.list({ status: 'running', ...bound, limit, ...(after ? { after } : {}) });
    own.push(...(agents ? page.filter((run) => agents.includes(run.agent)) : page));
    const last = page[page.length - 1];
    if (!agents || !last || page.length < limit || own.length >= limit) return own.slice(0, limit);
    after = { updatedAt: last.updatedAt, runId: last.runId };
  }
}

/**
 * The whole sweep for a queue that neither sees the runs nor holds a message for days (SQS): stalled runs
 * by the store's index, then the timers of waits due within 15 minutes. The scheduled sweeper function
 * runs it on AWS; a `stepwise worker --backend aws` runs it too, so runs worked off Lambda (`npm run
 * local-aws`, workers of your own) time out their long waits and get their lost messages back.
 */
export async function sweepRunsAndTimers(
  deps: { store: CheckpointStore; queue: RunQueue; clock: Clock; log: Logger },
  options: SweepOptions,
): Promise<{ requeued: RunMessage[]; timers: number; failed: number }> {
  const stalled = await requeueStalledRuns(deps, options);
  let timersFailed = 0;
  const timers = await sendDueTimers(deps, { ...(options.agents ? { agents: options.agents } : {}), onFailed: () => { timersFailed++; } });
  return { requeued: stalled.requeued, timers: timers.length, failed: stalled.failed + timersFailed };
}
