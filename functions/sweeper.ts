import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { sweepStalledRuns } from '../lib/engine/sweep.ts';
import { createLogger } from '../lib/log.ts';
import { systemClock, type RunMessage } from '../lib/ports.ts';

/**
 * Scheduled (EventBridge) supervisor: re-enqueues running runs that have not written a checkpoint for
 * STEPWISE_STALL_SECONDS (default 900), so a run whose message was lost resumes instead of stalling.
 * Needs TABLE_NAME, BUCKET_NAME and QUEUE_URL like the worker.
 */
let runtime: ReturnType<typeof openAwsRuntime> | undefined;
const log = createLogger({ service: 'stepwise-sweeper' });
/** Lambda's longest invocation: a run idle for longer is not inside a step (retry backoff is at most a minute). */
export const DEFAULT_STALL_MS = 15 * 60 * 1000;

export async function handler(): Promise<{ requeued: RunMessage[] }> {
  runtime ??= openAwsRuntime();
  const seconds = process.env.STEPWISE_STALL_SECONDS;
  const stallMs = seconds === undefined ? DEFAULT_STALL_MS : Number(seconds) * 1000;
  if (!(stallMs > 0)) throw new InvalidInputError(`STEPWISE_STALL_SECONDS must be a positive number, got ${seconds}`);
  const requeued = await sweepStalledRuns({ store: runtime.store, queue: runtime.queue, clock: systemClock, log }, { stallMs });
  log.info({ event: 'sweep', requeued: requeued.length, stallMs }, 'sweep finished');
  return { requeued };
}
