import { setTimeout as sleep } from 'node:timers/promises';
import type { Delivery, RunQueueConsumer } from '../ports.ts';
import type { EngineDeps } from './deps.ts';
import { InvalidInputError, errorMessage } from '../core/errors.ts';
import { handleDelivery, parseMessage, retryDelayMs, type Handled } from './handle-message.ts';
import { sweepStalledRuns } from './sweep.ts';
import { MAX_WORKER_CONCURRENCY } from '../settings.ts';

/** A running run with no checkpoint and no live message for this long is re-driven by a worker loop. */
export const DEFAULT_STALL_MS = 60_000;
/**
 * A timer's longest delay in Node. A longer one (a third of a visibility timeout over 74 days) fires
 * after 1 ms instead, which would renew every step in progress a thousand times a second.
 */
const MAX_TIMER_MS = 2_147_483_647;
/** How often a worker loop looks for such runs, give or take a fifth so that workers spread out. */
export const DEFAULT_SWEEP_EVERY_MS = 30_000;
/**
 * The longest a worker's loops go on stepping without letting the event loop turn (see stepLoop). Not
 * less: a turn runs what waited for it (V8's tasks among it), up to about 1 ms, and at 10 ms the worker
 * path with the fsync on went from 1.37x to 1.54x the durable insert (bench/step-overhead.ts, slower in
 * 11 of 14 pairs); at 100 ms it is one turn in about 500 steps. A signal, a timer, another loop's model
 * reply waits at most this long.
 */
const TURN_EVERY_MS = 100;
/** The least a loop waits before it polls again after a refused receive (receiveRefusal): a refusal comes at once. */
const REFUSED_RECEIVE_POLL_MS = 200;

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
  /** Look for them this often, ±20% (default 30 s; 0: never). */
  sweepEveryMs?: number;
  /**
   * What that look is. By default the consumer's own stalled-run sweep, on a queue that can see the runs
   * (local); on one that cannot (SQS), none unless given here: the sweeper function's work is `sweepRuns`
   * from `stepwise/aws` (the CLI's AWS worker gives sweepRunsAndTimers, which it wraps).
   */
  sweep?: () => Promise<unknown>;
  /**
   * Steps run at once, each on its own message (default 1, at most MAX_WORKER_CONCURRENCY). A step spends most of
   * its time awaiting the model: n loops let one process keep n runs moving.
   */
  concurrency?: number;
  /**
   * An error no retry mends (the local runtime's: a damaged database file): the step's delivery is handed
   * back and the worker stops with the error, where each delivery failed, was released and failed again
   * for as long as the worker ran, its log the only sign. A sweep that fails so stops it too.
   */
  stopOn?: (error: unknown) => boolean;
  /**
   * The backend's reading of an error no retry mends but the worker does not stop on (AWS refusing a
   * permission, a KMS key, the credentials): what was refused and what to change, for the step-error line,
   * which otherwise says the step will simply be delivered again. The CLI's AWS worker gives it; its local
   * worker and `stepwise run` give the file's write lock held past the busy timeout, which its holder
   * mends by letting go.
   */
  refusal?: (error: unknown) => { refused: string; fix: string } | undefined;
  /**
   * The backend's reading of a receive's error that passes once its cause is mended (the local file's full
   * disk): the worker logs it once (receive-refused, with what to do), takes nothing and polls again,
   * where the error stopped the worker (exit 1) and the runs it would have worked waited for a restart.
   */
  receiveRefusal?: (error: unknown) => { refused: string; fix: string } | undefined;
  /**
   * Kept filled with the deliveries whose steps are in progress, if given: what a process that ends in
   * the middle of one (a tool's process.exit, an uncaught exception) names as it goes (the CLI's worker).
   */
  inHand?: Set<Delivery>;
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
 *
 * With `concurrency` n, n such loops share the process, its connection and its heartbeat: while one step
 * awaits its model, the others run. Each holds one delivery, so no two of them step the same message, and
 * the version check on every write settles a duplicate as between processes. The worker stops when the
 * signal aborts, when `onHandled` says so, or when a loop fails (the others finish their step and stop,
 * then the error is thrown); with `idleExitMs`, when no loop is stepping and none has started a step for
 * that long.
 */
export async function runWorker(deps: EngineDeps, consumer: RunQueueConsumer, options: WorkerOptions = {}): Promise<void> {
  const concurrency = options.concurrency ?? 1;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1 || concurrency > MAX_WORKER_CONCURRENCY) {
    throw new InvalidInputError(`concurrency must be a whole number from 1 to ${MAX_WORKER_CONCURRENCY}, not ${String(concurrency)}`);
  }
  checkDurations(options);
  const visibilityMs = options.visibilityMs ?? 30_000;
  /** The deliveries whose steps are in progress, for the heartbeat. */
  const inFlight = options.inHand ?? new Set<Delivery>();
  // One heartbeat for the worker's life, not a timer armed and cleared each step: that cost 10 us of a
  // 100 us step (fsync off). A tick renews every step in progress, so a step's delivery is renewed within
  // a third of the visibility of its start and every third after, however long the step runs.
  const heartbeat = setInterval(() => {
    for (const delivery of inFlight) {
      consumer.release(delivery, visibilityMs).catch((error: unknown) => deps.log.warn({ event: 'heartbeat-failed', error: errorMessage(error) }, 'heartbeat failed'));
    }
  }, Math.min(Math.max(50, visibilityMs / 3), MAX_TIMER_MS));
  // The idle and turn times are spans of this process's life, on its monotonic clock: Date.now() steps with
  // the system's clock (NTP, a VM restored), and an hour forward stopped an idle worker at once as idle.
  const shared: Shared = { nextSweepAt: deps.clock.now(), lastActivity: performance.now(), turnAt: performance.now(), inFlight };
  try {
    // The loops take the visibility the heartbeat renews, not a default of their own.
    const resolved: LoopOptions = { ...options, visibilityMs };
    if (concurrency === 1) return await stepLoop(deps, consumer, resolved, shared);
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const { onHandled } = options;
    const loopOptions: LoopOptions = {
      ...resolved, signal,
      onHandled: (handled) => {
        if (!onHandled?.(handled)) return false;
        stop.abort();
        return true;
      },
    };
    const loops = Array.from({ length: concurrency }, () => stepLoop(deps, consumer, loopOptions, shared).catch((error: unknown) => {
      stop.abort();
      throw error;
    }));
    const failed = (await Promise.allSettled(loops)).find((loop) => loop.status === 'rejected');
    if (failed) throw failed.reason;
  } finally {
    clearInterval(heartbeat);
  }
}

/**
 * What a worker's loops share: when the next sweep is due (one loop does it), when a loop last started a
 * step, when one last let the event loop turn (both by performance.now()), and the steps in progress.
 */
interface Shared { nextSweepAt: number; lastActivity: number; turnAt: number; inFlight: Set<Delivery> }

/**
 * How long until the next sweep, by the engine's clock. A next sweep further off than one interval can be
 * (the interval and its fifth) was set before that clock stepped back: it is due now, where the worker
 * swept again only once the clock had caught up, an hour for an hour's step, sending no wait timer meanwhile.
 */
function untilSweep(shared: Shared, now: number, everyMs: number): number {
  const left = shared.nextSweepAt - now;
  return left > everyMs * 1.2 ? 0 : Math.max(0, left);
}

/**
 * A program's options are checked as the CLI checks its flags: a NaN visibility failed the first receive
 * with SQLite's "NOT NULL constraint failed".
 */
function checkDurations(options: WorkerOptions): void {
  // Only the least: a visibility past a timer's limit is taken as that limit where a timer needs it.
  const least = { visibilityMs: 1, waitMs: 0, idleExitMs: 0, stallMs: 1, sweepEveryMs: 0, maxReceives: 1 } as const;
  for (const [name, min] of Object.entries(least)) {
    const value = options[name as keyof typeof least];
    if (value !== undefined && !(typeof value === 'number' && Number.isFinite(value) && value >= min)) {
      throw new InvalidInputError(`${name} must be a finite number of at least ${min}, not ${String(value)}`);
    }
  }
}

/** A step loop's options: the worker's, with the visibility resolved once for the loops and the heartbeat. */
type LoopOptions = WorkerOptions & { visibilityMs: number };

/**
 * A receive's wait, cut short by the next sweep and by the idle exit: with a long waitMs (a minute, as
 * for SQS's long poll) both came only once the wait was over, a sweep late by up to the wait and an idle
 * worker left waiting it out.
 */
function receiveWaitMs(deps: EngineDeps, options: LoopOptions, shared: Shared, sweeps: boolean): number {
  let wait = options.waitMs ?? 1000;
  if (sweeps) wait = Math.min(wait, untilSweep(shared, deps.clock.now(), options.sweepEveryMs ?? DEFAULT_SWEEP_EVERY_MS));
  // Only while no loop has a step in hand: the worker is not idle then, and a wait cut to 0 would spin.
  if (options.idleExitMs !== undefined && !shared.inFlight.size) wait = Math.min(wait, Math.max(0, shared.lastActivity + options.idleExitMs - performance.now()));
  return wait;
}

async function stepLoop(deps: EngineDeps, consumer: RunQueueConsumer, options: LoopOptions, shared: Shared): Promise<void> {
  const { visibilityMs } = options;
  const sweepEveryMs = options.sweepEveryMs ?? DEFAULT_SWEEP_EVERY_MS;
  const stalled = consumer.stalledRuns?.bind(consumer);
  const sweep = sweepEveryMs <= 0 ? undefined : options.sweep ?? (stalled
    ? () => sweepStalledRuns({ store: deps.store, queue: deps.queue, clock: deps.clock, log: deps.log, stalled }, { stallMs: options.stallMs ?? DEFAULT_STALL_MS })
    : undefined);
  // Only with a way to give back what a last step received: a worker stopping must not sit on it.
  const receive = consumer.handBack ? consumer.receiveInCommit?.(visibilityMs) : undefined;
  /** Received for this loop and not started yet: the next step's delivery, or the rest of a batch. */
  let held: Delivery[] = [];
  /** This loop's last receive was refused (receiveRefusal): said once while it lasts, not every poll. */
  let receiveRefused = false;
  try {
    while (!options.signal?.aborted) {
      if (sweep && untilSweep(shared, deps.clock.now(), sweepEveryMs) === 0) {
        shared.nextSweepAt = deps.clock.now() + sweepEveryMs * (0.8 + 0.4 * Math.random());
        await sweep().catch((error: unknown) => {
          if (options.stopOn?.(error)) throw error;
          deps.log.warn({ event: 'sweep-failed', error: errorMessage(error) }, 'sweep failed (stalled runs, or due wait timers on AWS); the next one retries');
        });
      }
      if (!held.length) {
        const waitMs = receiveWaitMs(deps, options, shared, sweep !== undefined);
        try {
          held = await consumer.receive({ waitMs, visibilityMs, ...(options.signal ? { signal: options.signal } : {}) });
          receiveRefused = false;
        } catch (error) {
          const refused = options.stopOn?.(error) ? undefined : options.receiveRefusal?.(error);
          if (!refused) throw error;
          // Once while it lasts: the poll goes on every REFUSED_RECEIVE_POLL_MS at least, and an idle exit
          // (below: nothing was received) still comes.
          if (!receiveRefused) deps.log.error({ event: 'receive-refused', workerId: deps.workerId, refused: refused.refused, error: errorMessage(error) }, `no message could be received: ${refused.fix}; the worker polls again until this is mended`);
          receiveRefused = true;
          await sleep(Math.max(REFUSED_RECEIVE_POLL_MS, waitMs), undefined, options.signal ? { signal: options.signal } : {}).catch(() => undefined);
        }
        // Stopped while it waited: what came is handed back (below), not started.
        if (options.signal?.aborted) break;
      }
      const delivery = held.shift();
      if (!delivery) {
        // Idle is the worker's, not this loop's: a loop leaves only when none has started a step for that long.
        if (options.idleExitMs !== undefined && !shared.inFlight.size && performance.now() - shared.lastActivity >= options.idleExitMs) return;
        // A receive that waits for nothing (waitMs 0) resolves at once: without this, a loop polling an
        // empty queue would hold the event loop, and the other loops' steps (their model, their timers) with it.
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      shared.lastActivity = performance.now();
      shared.inFlight.add(delivery);
      let handled: Handled;
      try {
        // One delivery in hand at a time: the rest of a batch comes first.
        handled = await handleDelivery(deps, delivery, { maxReceives: options.maxReceives, receive: held.length ? undefined : receive });
      } catch (error) {
        if (options.stopOn?.(error)) {
          // Handed back below with the rest held: not a try of its step, for whichever worker runs next.
          held.unshift(delivery);
          throw error;
        }
        const refused = options.refusal?.(error);
        const line = { event: 'step-error', ...runOf(delivery), workerId: deps.workerId, error: errorMessage(error), body: delivery.body };
        if (!refused) deps.log.error(line, 'step did not finish; the message will be delivered again');
        else deps.log.error({ ...line, refused: refused.refused }, `step did not finish: ${refused.fix}; the message is delivered again until this is mended`);
        handled = { action: 'release', delayMs: retryDelayMs(Math.min(delivery.receiveCount, 6)) };
      } finally {
        shared.inFlight.delete(delivery);
      }
      if (handled.action === 'ack' && handled.next) held.push(...handled.next);
      // A step whose checkpoint acked its delivery (the queue in the store's database) needs no second write.
      const settled = handled.action === 'release' ? consumer.release(delivery, handled.delayMs) : handled.acked ? undefined : consumer.ack(delivery);
      // One refused (the file locked past the busy timeout) loses nothing: the message comes back after its
      // visibility timeout, a stale no-op or the step's next try. The worker goes on, where it used to stop.
      // No await when the checkpoint acked it: the local worker path's common step stays without a tick.
      if (settled) await settled.catch((error: unknown) => deps.log.warn(
        { event: `${handled.action}-failed`, ...runOf(delivery), workerId: deps.workerId, error: errorMessage(error), body: delivery.body },
        `a message was not ${handled.action === 'ack' ? 'acked' : 'released'}: it comes back after its visibility timeout`,
      ));
      if (options.onHandled?.(handled)) return;
      // A step that awaits no I/O (a model or tool that answers at once, a wait's timer, its next message
      // handed over in its commit) ends in microtasks alone: a run of such steps never let the event loop
      // turn, so the process's timers (the heartbeat, a tool's timeout, the other loops' polls), its I/O
      // (the other loops' model calls) and its signals (SIGTERM) waited until the run stopped, or until a
      // thousand due waits had all been woken. One turn every TURN_EVERY_MS (which says why not more often).
      if (performance.now() - shared.turnAt >= TURN_EVERY_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        shared.turnAt = performance.now();
      }
    }
  } finally {
    // Not started, so not a try of its step: another worker takes it now, and its step counts no restart.
    for (const delivery of held) {
      await (consumer.handBack ? consumer.handBack(delivery) : consumer.release(delivery, 0))
        .catch((error: unknown) => deps.log.warn({ event: 'hand-back-failed', ...runOf(delivery), workerId: deps.workerId, error: errorMessage(error) }, 'a received message was not handed back: it comes back after its visibility timeout'));
    }
  }
}

/**
 * The run a delivery is for, as fields of its line: named only inside the body's text, a step that did not
 * finish was missed by a search of the logs for its run (runId = "..."), as the Lambda's delivery-error is not.
 */
function runOf(delivery: Delivery): { runId?: string; version?: number } {
  const message = delivery.message ?? (() => {
    const parsed = parseMessage(delivery.body);
    return parsed.success ? parsed.data : undefined;
  })();
  return message ? { runId: message.runId, version: message.version } : {};
}
