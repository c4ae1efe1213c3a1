import * as z from 'zod';
import { ClaimLostError, IdempotencyInProgressError, ModelKeyError, NewerFormatError, StaleVersionError, UnknownRunError, WrongAgentError } from '../core/errors.ts';
import type { RunState } from '../core/state.ts';
import type { Delivery, QueueReceive, QueueWork, RedriveOptions } from '../ports.ts';
import { advance, type Advance, type AdvanceOptions } from './advance.ts';
import type { EngineDeps } from './deps.ts';
import { driveWait } from '../waits/drive.ts';
import { resumeLoad, stepCacheOf } from './step-cache.ts';
import { DEFAULT_MAX_RECEIVES } from '../settings.ts';

/** A queue message's body: the schema is the rule; parseMessage checks the common case by hand first. */
export const runMessageSchema = z.object({ runId: z.string().min(1), version: z.number().int().positive() }).strict();

/**
 * Tries of one step beyond DEFAULT_MAX_RECEIVES fail its run: the step keeps killing its worker. A try is a
 * delivery that reached the step (advance counts them); deliveries lost to an unavailable store do not count.
 */
export { DEFAULT_MAX_RECEIVES };
const NEWER_FORMAT_RETRY_MS = 60_000;
/** A message for another agent's run comes back this late, so the wrong worker does not spin on it. */
export const WRONG_AGENT_RETRY_MS = 60_000;
/**
 * A try whose claim another attempt took hands its message back for this long: the next delivery finds the
 * step committed (a stale message) or the key still held, and then waits out the holder's lease.
 */
const CLAIM_TAKEN_RETRY_MS = 1_000;

/** How long a step waits for a valid model key: 1 minute, doubling per delivery, at most 15. */
export function keyRetryDelayMs(receiveCount: number): number {
  return Math.min(15 * 60_000, 60_000 * 2 ** (Math.min(Math.max(receiveCount, 1), 5) - 1));
}

export type Handled =
  /**
   * `approvalLinks`: the links of the approval emails a waiting run has out, for the terminal. `acked`: the
   * step's checkpoint acked the delivery in its own transaction, so the caller has nothing left to ack.
   * `next`: what the checkpoint's transaction received for the caller (the `receive` option), in flight
   * for it: the caller handles it next, or hands it back (RunQueueConsumer.handBack). `failedNow`: this
   * delivery failed the run, its checkpoint unreadable (running, or waiting when its timer came).
   */
  | { action: 'ack'; outcome?: Advance; runId?: string; approvalLinks?: string[]; acked?: true; next?: Delivery[]; failedNow?: true }
  /** `busy`: the step's idempotency key is claimed by another try until then (IdempotencyInProgressError). */
  | { action: 'release'; delayMs: number; runId?: string; busy?: { key: string; leaseUntil: number } };

/** Backoff before retrying a failed attempt: 1 s, 2 s, 4 s ... capped at a minute. */
export function retryDelayMs(failures: number): number {
  return failures > 0 ? Math.min(60_000, 1000 * 2 ** (failures - 1)) : 0;
}

/** The longest retry-after a failed try's next one waits for: a longer one (or a date far off) is not believed. */
export const MAX_RETRY_AFTER_MS = 15 * 60_000;

/**
 * Before the next try of a step whose last try failed: the backoff, or the retry-after the failure asked
 * for (TransientError.retryAfterMs) when that is longer, up to MAX_RETRY_AFTER_MS.
 */
export function failureDelayMs(failures: number, retryAfterMs?: number): number {
  const backoff = retryDelayMs(failures);
  if (failures === 0 || retryAfterMs === undefined) return backoff;
  return Math.max(backoff, Math.min(Math.ceil(retryAfterMs), MAX_RETRY_AFTER_MS));
}

/**
 * Handles one queue message: advance its run by one step, enqueue the next step, then let the caller ack.
 * Duplicate and stale messages are harmless: they re-drive the message for the run's latest version, which
 * the queue deduplicates (on SQS within 5 minutes; a later copy is itself a stale no-op), so a lost
 * enqueue (crash C7) is recovered and nothing runs twice.
 *
 * Where the queue lives in the store's database (CheckpointStore.carriesQueueWork) and the delivery has
 * its receipt, the step's checkpoint also sends the next message and acks this one, in one transaction:
 * C6, C7 and C8 then all come after it, and a crash there loses and repeats nothing. With `receive` (the
 * consumer's RunQueueConsumer.receiveInCommit), that transaction also receives the caller's next message
 * (Handled.next); a crash after it leaves that message in flight, back after its visibility timeout.
 */
export async function handleDelivery(
  deps: EngineDeps,
  delivery: Pick<Delivery, 'body' | 'receiveCount' | 'message'> & { receipt?: string },
  options: { maxReceives?: number | undefined; receive?: QueueReceive | undefined } = {},
): Promise<Handled> {
  let message = delivery.message;
  if (!message) {
    const parsed = parseMessage(delivery.body);
    if (!parsed.success) {
      deps.log.error({ event: 'malformed-message', body: delivery.body.slice(0, 2000), error: parsed.error }, 'malformed message dropped');
      return { action: 'ack' };
    }
    message = parsed.data;
  }
  const { runId, version } = message;
  const maxReceives = options.maxReceives ?? DEFAULT_MAX_RECEIVES;
  let outcome: Advance;
  try {
    // Built with its fields set, not spread from conditional objects: this runs at every step.
    const advanceOptions: AdvanceOptions = { expectVersion: version, receiveCount: delivery.receiveCount, maxTries: maxReceives };
    if (delivery.receipt && deps.store.carriesQueueWork) advanceOptions.queueWork = queueWorkOf(delivery.receipt, options.receive);
    outcome = await advance(deps, runId, advanceOptions);
  } catch (error) {
    if (error instanceof UnknownRunError) {
      deps.log.error({ event: 'unknown-run', runId, version }, error.message);
      return { action: 'ack', runId };
    }
    if (error instanceof StaleVersionError) return afterStaleWrite(deps, runId, version, delivery);
    if (error instanceof IdempotencyInProgressError) {
      // A live claim of another attempt: not a failure of the step. Its holder renews it only while it
      // lives, so the wait ends within a lease; the message comes back then, and nothing is written.
      deps.log.info({ event: 'idempotency-key-busy', runId, version, key: error.key, leaseUntil: error.leaseUntil, retryAfterMs: error.retryAfterMs }, 'idempotency key held by another attempt: waiting for its lease');
      return { action: 'release', delayMs: error.retryAfterMs, runId, busy: { key: error.key, leaseUntil: error.leaseUntil } };
    }
    if (error instanceof ClaimLostError && error.taken) {
      // Another attempt took the key while this one's effect ran: it applies the effect and commits the
      // step. Nothing was written; the message comes back soon, to find the step done or the key held.
      deps.log.warn({ event: 'claim-taken', runId, version, key: error.key, workerId: deps.workerId }, `${error.message}: this try counts for nothing, and the message is handed back`);
      return { action: 'release', delayMs: CLAIM_TAKEN_RETRY_MS, runId };
    }
    if (error instanceof WrongAgentError) {
      deps.log.error({
        event: 'wrong-agent', runId, version, runAgent: error.runAgent, workerAgent: error.workerAgent, workerId: deps.workerId,
      }, `${error.message}: handed back, not stepped. ${error.fix}`);
      return { action: 'release', delayMs: WRONG_AGENT_RETRY_MS, runId };
    }
    if (error instanceof ModelKeyError) {
      const delayMs = keyRetryDelayMs(delivery.receiveCount);
      deps.log.error({ event: 'model-key-refused', runId, version, delayMs, error: error.message }, 'the model key or its account was refused: the run waits until it is fixed, nothing is counted');
      return { action: 'release', delayMs, runId };
    }
    if (error instanceof NewerFormatError) return leaveForNewerCode(deps, error, runId, version);
    // Anything else (a locked database, a throttled table, a crash) propagates: the caller leaves the
    // message to be delivered again, exactly as if this worker had died here.
    throw error;
  }

  if (outcome.kind === 'stale-message') {
    // Said as it is: a cancelled run's wait timer, or a copy for a run that ended, moves nothing.
    const next = outcome.status === 'running' ? 're-driving the latest'
      : outcome.status === 'waiting' ? 'the run waits: its wait is looked at again' : `the run is ${outcome.status}: nothing to do`;
    deps.log.info({ event: 'stale-message', runId, version, latest: outcome.version, status: outcome.status }, `message for an older version: ${next}`);
  }
  const status = outcome.kind === 'advanced' ? outcome.state.status : outcome.status;
  if (status === 'running' && outcome.kind !== 'idle') {
    if (deps.probe) await deps.probe('C7', { runId, step: outcome.kind === 'advanced' ? outcome.state.step : -1 });
    if (outcome.kind === 'advanced') {
      if (!outcome.queued?.send) await deps.queue.send({ runId, version: outcome.version }, { delayMs: failureDelayMs(outcome.state.failures, outcome.retryAfterMs) });
    }
    // The latest version's message may have been consumed without a successor: a plain send would be
    // swallowed by its deduplication record.
    else await deps.queue.redrive({ runId, version: outcome.version }, heldBy(delivery));
  }
  // A waiting run (just saved so, or found so by a redelivery or its timer): emails once, early events,
  // the timer, the deadline. All of it is safe to repeat.
  let driven: Awaited<ReturnType<typeof driveWait>> | undefined;
  if (status === 'waiting') {
    try {
      driven = await driveWait(deps, runId);
    } catch (error) {
      if (error instanceof NewerFormatError) return leaveForNewerCode(deps, error, runId, version);
      throw error;
    }
  }
  if (deps.probe) await deps.probe('C8', { runId, step: outcome.kind === 'advanced' ? outcome.state.step : -1 });
  const handled: Handled = { action: 'ack', outcome, runId };
  if (driven?.links.length) handled.approvalLinks = driven.links;
  if (driven?.failed || (outcome.kind === 'idle' && outcome.failedNow)) handled.failedNow = true;
  if (outcome.kind === 'advanced') {
    if (outcome.queued?.ack) handled.acked = true;
    if (outcome.received?.length) handled.next = outcome.received;
  }
  return handled;
}

/**
 * The queue work a step's checkpoint carries: what this handler would do after it, but in its transaction.
 * A running run gets its next message (with the retry backoff); the delivery is acked unless the run now
 * waits, whose wait is driven (emails, timer) before the ack, as on the unfolded path. The receive goes
 * only with the ack: then nothing after the commit can fail but a crash, so no error strands what it took.
 */
function queueWorkOf(receipt: string, receive: QueueReceive | undefined): NonNullable<AdvanceOptions['queueWork']> {
  const ack = { ack: receipt, ...(receive ? { receive } : {}) };
  return (next, version, retryAfterMs) => next.status === 'running'
    ? { send: { message: { runId: next.runId, version }, delayMs: failureDelayMs(next.failures, retryAfterMs) }, ...ack }
    : next.status === 'waiting' ? {} : ack;
}

/**
 * Written by newer code (or with fields this code does not know): the run stays as it is, its status too,
 * and `stepwise status` / `stepwise drift` say what it needs. The message comes back for a newer worker.
 */
function leaveForNewerCode(deps: EngineDeps, error: NewerFormatError, runId: string, version: number): Handled {
  deps.log.warn({ event: 'newer-format', runId, version, record: error.record, needs: error.needs, workerId: deps.workerId }, error.message);
  return { action: 'release', delayMs: NEWER_FORMAT_RETRY_MS, runId };
}

/**
 * Another worker wrote first, which does not end the story: it may have died before sending the message
 * for what it wrote, and this delivery may hold the run's newest receipt, so acking it could leave the run
 * running with nothing to move it. Reload: a running run gets the message for its latest version (a no-op
 * if the winner sent it) before this one is acked. Still at this message's version, the message itself is
 * the way forward: it comes back instead (and the receive count still bounds a loop).
 */
async function afterStaleWrite(deps: EngineDeps, runId: string, version: number, delivery: { receiveCount: number; receipt?: string }): Promise<Handled> {
  const { receiveCount } = delivery;
  const latest = await deps.store.load(runId, resumeLoad(stepCacheOf(deps.store).get(runId)));
  const line = { event: 'stale-write', runId, version, latest: latest?.version, status: latest?.status, workerId: deps.workerId };
  // Cancelled under it, this worker held the step past its message's visibility timeout: "another worker
  // advanced this run" sent an operator looking for a second worker stepping it, where what is worth knowing
  // is that the step's record is gone while its effect, if it applied one, stays applied.
  if (latest?.status === 'cancelled') {
    deps.log.warn(line, `stale write rejected: run ${runId} was cancelled while this worker held its step past its message's visibility timeout (${latest.reason ?? 'cancelled'}); the step is not recorded, and an effect it applied under its idempotency key stays applied`);
  } else deps.log.warn(line, 'stale write rejected: another worker advanced this run');
  if (!latest || latest.status !== 'running') return { action: 'ack', runId };
  if (latest.version === version) return { action: 'release', delayMs: retryDelayMs(Math.min(receiveCount, 6)), runId };
  await deps.queue.redrive({ runId, version: latest.version }, heldBy(delivery));
  return { action: 'ack', runId };
}

/** The delivery this handler acks after a redrive: its own row is no message that moves the run. */
function heldBy(delivery: { receipt?: string }): RedriveOptions {
  return delivery.receipt === undefined ? {} : { held: delivery.receipt };
}

export function parseMessage(body: string): z.ZodSafeParseResult<{ runId: string; version: number }> {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return runMessageSchema.safeParse(Symbol('not json'));
  }
  // The messages this code sends, checked by hand (a busy worker parses one a step; zod took 4-5 us of it).
  // Anything else goes to the schema, which accepts nothing more and says what is wrong.
  if (isRunMessage(json)) return { success: true, data: json };
  return runMessageSchema.safeParse(json);
}

/** What runMessageSchema accepts: exactly a non-empty runId and a positive whole version. */
function isRunMessage(json: unknown): json is { runId: string; version: number } {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return false;
  const keys = Object.keys(json);
  if (keys.length !== 2) return false;
  const { runId, version } = json as Record<string, unknown>;
  return typeof runId === 'string' && runId.length > 0 && Number.isSafeInteger(version) && (version as number) > 0;
}
