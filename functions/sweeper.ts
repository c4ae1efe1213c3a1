import { agentNames, loadAgent } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { sweepStalledRuns } from '../lib/engine/sweep.ts';
import { createLogger } from '../lib/log.ts';
import { systemClock, type RunMessage } from '../lib/ports.ts';
import { sendDueTimers } from '../lib/waits/timers.ts';

/**
 * Scheduled (EventBridge) supervisor: re-enqueues running runs that have not written a checkpoint for
 * STEPWISE_STALL_SECONDS (default 900), so a run whose message was lost resumes instead of stalling, and
 * sends the timers of waits whose deadline comes within 15 minutes.
 * Needs TABLE_NAME, BUCKET_NAME and QUEUE_URL like the worker. With STEPWISE_AGENT (the worker's agent
 * module) it sweeps only that agent's runs: set it when several agents share the table, each with its queue.
 */
let runtime: ReturnType<typeof openAwsRuntime> | undefined;
let agents: Promise<string[] | undefined> | undefined;
const log = createLogger({ service: 'stepwise-sweeper' });
/** Lambda's longest invocation: a run idle for longer is not inside a step (retry backoff is at most a minute). */
export const DEFAULT_STALL_MS = 15 * 60 * 1000;

export async function handler(): Promise<{ requeued: RunMessage[]; timers: number }> {
  runtime ??= openAwsRuntime();
  const seconds = process.env.STEPWISE_STALL_SECONDS;
  const stallMs = seconds === undefined ? DEFAULT_STALL_MS : Number(seconds) * 1000;
  if (!(stallMs > 0)) throw new InvalidInputError(`STEPWISE_STALL_SECONDS must be a positive number, got ${seconds}`);
  agents ??= (process.env.STEPWISE_AGENT ? loadAgent(process.env.STEPWISE_AGENT).then(agentNames) : Promise.resolve(undefined))
    .catch((error: unknown) => { agents = undefined; throw error; });
  const only = await agents;
  const requeued = await sweepStalledRuns({ store: runtime.store, queue: runtime.queue, clock: systemClock, log }, { stallMs, ...(only ? { agents: only } : {}) });
  // Waits too long for SQS to hold their timer get it when they come due (lib/waits/timers.ts).
  const timers = await sendDueTimers({ store: runtime.store, queue: runtime.queue, clock: systemClock, log }, only ? { agents: only } : {});
  log.info({ event: 'sweep', requeued: requeued.length, timers: timers.length, stallMs }, 'sweep finished');
  return { requeued, timers: timers.length };
}
