import { agentNames, loadAgent } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { DEFAULT_STALL_MS, sweepStalledRuns } from '../lib/aws/stalled-runs.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createLogger } from '../lib/log.ts';
import { systemClock, type RunMessage } from '../lib/ports.ts';

/**
 * Scheduled (EventBridge) supervisor: re-enqueues running runs that have not written a checkpoint for
 * STEPWISE_STALL_SECONDS (default 900), so a run whose message was lost resumes instead of stalling.
 * Needs TABLE_NAME, BUCKET_NAME and QUEUE_URL like the worker. With STEPWISE_AGENT (the worker's agent
 * module) it sweeps only that agent's runs: set it when several agents share the table, each with its queue.
 */
let runtime: ReturnType<typeof openAwsRuntime> | undefined;
let agents: Promise<string[] | undefined> | undefined;
const log = createLogger({ service: 'stepwise-sweeper' });

export async function handler(): Promise<{ requeued: RunMessage[] }> {
  runtime ??= openAwsRuntime();
  const seconds = process.env.STEPWISE_STALL_SECONDS;
  const stallMs = seconds === undefined ? DEFAULT_STALL_MS : Number(seconds) * 1000;
  if (!(stallMs > 0)) throw new InvalidInputError(`STEPWISE_STALL_SECONDS must be a positive number, got ${seconds}`);
  agents ??= (process.env.STEPWISE_AGENT ? loadAgent(process.env.STEPWISE_AGENT).then(agentNames) : Promise.resolve(undefined))
    .catch((error: unknown) => { agents = undefined; throw error; });
  const only = await agents;
  const requeued = await sweepStalledRuns({ store: runtime.store, queue: runtime.queue, clock: systemClock, log }, { stallMs, ...(only ? { agents: only } : {}) });
  log.info({ event: 'sweep', requeued: requeued.length, stallMs }, 'sweep finished');
  return { requeued };
}
