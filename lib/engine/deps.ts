import { hostname } from 'node:os';
import type { AgentDefinition } from '../agent.ts';
import type { Logger } from '../log.ts';
import type { BlobStore, CheckpointStore, Clock, IdempotencyLedger, Model, RunQueue } from '../ports.ts';
import type { WaitServices } from '../waits/services.ts';

/** A worker id for a process of its own (the CLI's commands, an embedding program): host and pid. */
export const processWorkerId = (): string => `${hostname()}-${process.pid}`;

/** The crash points of one step (see the README's design section). */
export type CrashPoint = 'C1' | 'C2' | 'C3' | 'C4' | 'C5' | 'C6' | 'C7' | 'C8';

export interface EngineDeps {
  store: CheckpointStore;
  blobs: BlobStore;
  ledger: IdempotencyLedger;
  queue: RunQueue;
  model: Model;
  agent: AgentDefinition;
  clock: Clock;
  workerId: string;
  codeVersion: string;
  log: Logger;
  /**
   * Called as a step passes each crash point; a test throws here (or kills the process) to crash exactly
   * there. Absent in production, where the step does not await it (`if (deps.probe) await ...`): an await
   * of nothing still costs a turn of the microtask queue, six a step.
   */
  probe?: (point: CrashPoint, at: { runId: string; step: number }) => void | Promise<void>;
  signal?: AbortSignal;
  /** Approval emails, links, kept events, timer limits: what waiting runs need (lib/waits). */
  waits?: WaitServices;
}
