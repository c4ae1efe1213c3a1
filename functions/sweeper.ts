import { loadAgent, type AgentDefinition } from '../lib/agent.ts';
import { sweepRuns, type RunSweep } from '../lib/aws/run-sweep.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createLogger } from '../lib/log.ts';
import { AGENT_ENV, DEFAULT_SWEEPER_STALL_MS, STALL_SECONDS_ENV } from '../lib/settings.ts';

/**
 * Scheduled (EventBridge) supervisor: re-enqueues running runs that have not written a checkpoint for
 * STEPWISE_STALL_SECONDS (default 900), so a run whose message was lost resumes instead of stalling, and
 * sends the timers of waits whose deadline comes within 15 minutes.
 * Needs TABLE_NAME, BUCKET_NAME and QUEUE_URL like the worker. With an agent (STEPWISE_AGENT, the worker's
 * agent module, or `sweeperHandlerFor(agent)` in a bundle) it sweeps only that agent's runs: set it when
 * several agents share the table, each with its queue.
 */
export type SweeperHandler = () => Promise<RunSweep>;

const log = createLogger({ service: 'stepwise-sweeper' });
/**
 * Lambda's longest invocation: a run idle for longer is not inside a step. A run between tries may be (a
 * retry-after can hide its message up to 15 minutes): the copy sent for it waits behind that message, as
 * SQS FIFO delivers one message of a run at a time, and finds the run moved on.
 */
export const DEFAULT_STALL_MS = DEFAULT_SWEEPER_STALL_MS;

/** `agent`: only its runs (its name and former names); undefined sweeps every run of the table. */
export function sweeperHandlerFor(agent: AgentDefinition | (() => Promise<AgentDefinition | undefined>) | undefined): SweeperHandler {
  let runtime: ReturnType<typeof openAwsRuntime> | undefined;
  let loaded: Promise<AgentDefinition | undefined> | undefined;
  return async () => {
    runtime ??= openAwsRuntime();
    const seconds = process.env[STALL_SECONDS_ENV];
    const stallMs = seconds === undefined ? DEFAULT_STALL_MS : Number(seconds) * 1000;
    // Finite too: "Infinity" passed a check of > 0 alone, and every sweep then threw sweepRuns' "stallMs must
    // be...", naming neither the setting nor that no timer went out either.
    if (!(stallMs > 0 && Number.isFinite(stallMs))) throw new InvalidInputError(`${STALL_SECONDS_ENV} must be a positive number of seconds, got ${seconds}`);
    loaded ??= (typeof agent === 'function' ? agent() : Promise.resolve(agent))
      .catch((error: unknown) => { loaded = undefined; throw error; });
    const only = await loaded;
    // Waits too long for SQS to hold their timer get it when they come due (lib/waits/timers.ts).
    const swept = await sweepRuns(runtime, { stallMs, log, ...(only ? { agent: only } : {}) });
    log.info({ event: 'sweep', requeued: swept.requeued.length, timers: swept.timers, failed: swept.failed, stallMs }, 'sweep finished');
    // The invocation fails, so the SweeperErrors alarm (and the function's Errors metric) shows it: a queue
    // that refuses every send (a policy, its KMS key) left the sweep succeeding each time, with runs that
    // lost their message and waits past their deadline stuck, and nothing but log lines to tell.
    if (swept.failed) throw new Error(`the queue refused ${swept.failed} of this sweep's messages (requeue-failed and timer-send-failed lines say why): their runs wait for a sweep whose sends succeed`);
    return swept;
  };
}

// Marked pure: a bundle of the construct imports only the factory, and esbuild then leaves this handler out.
export const handler: SweeperHandler = /* @__PURE__ */ sweeperHandlerFor(async () => (process.env[AGENT_ENV] ? loadAgent(process.env[AGENT_ENV]) : undefined));
