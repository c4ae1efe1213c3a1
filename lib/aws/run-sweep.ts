import { agentNames, type AgentDefinition } from '../agent.ts';
import { InvalidInputError } from '../core/errors.ts';
import { sweepRunsAndTimers } from '../engine/sweep.ts';
import { createLogger, type Logger } from '../log.ts';
import { systemClock, type Clock, type RunMessage } from '../ports.ts';
import { DEFAULT_SWEEPER_STALL_MS } from '../settings.ts';
import type { AwsRuntime } from './runtime.ts';

export interface RunSweepOptions {
  /**
   * Only this agent's runs (its name and former names). Agents that share a table each have their own
   * queue: a sweep must put back only its own agent's runs, on its own queue. Without it, every run of the
   * table goes to this runtime's queue.
   */
  agent?: AgentDefinition;
  /** A running run with no checkpoint for this long is re-driven (default 15 minutes, longer than any Lambda invocation). */
  stallMs?: number;
  log?: Logger;
  clock?: Clock;
}

export interface RunSweep {
  /** The messages sent for runs left running with nothing to move them. */
  requeued: RunMessage[];
  /** Timers sent for waits whose deadline comes within 15 minutes. */
  timers: number;
  /** Messages of either kind the queue refused (each logged, as requeue-failed or timer-send-failed): the next sweep tries them again. */
  failed: number;
}

/**
 * One sweep of the AWS runtime, the scheduled sweeper function's work, for a program of your own: SQS
 * cannot show which runs have a message, nor hold a timer for more than 15 minutes, so a worker of your own
 * (runWorker on openAwsRuntime's queue) re-drives no lost message and ends no long wait without it. Give
 * it as runWorker's `sweep`, or run it on a schedule of your own; running two at once adds no copy.
 */
export async function sweepRuns(runtime: Pick<AwsRuntime, 'store' | 'queue'>, options: RunSweepOptions = {}): Promise<RunSweep> {
  const stallMs = options.stallMs ?? DEFAULT_SWEEPER_STALL_MS;
  // 0 would re-drive every run inside a step, on every sweep.
  if (!Number.isFinite(stallMs) || stallMs <= 0) throw new InvalidInputError(`stallMs must be a number of milliseconds above 0, not ${String(stallMs)}`);
  const deps = { store: runtime.store, queue: runtime.queue, clock: options.clock ?? systemClock, log: options.log ?? createLogger({ service: 'stepwise-sweeper' }) };
  return sweepRunsAndTimers(deps, { stallMs, ...(options.agent ? { agents: agentNames(options.agent) } : {}) });
}
