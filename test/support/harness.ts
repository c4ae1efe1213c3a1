import { join } from 'node:path';
import type { AgentDefinition } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import type { RunState } from '../../lib/core/state.ts';
import type { CrashPoint, EngineDeps } from '../../lib/engine/deps.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { startRun } from '../../lib/engine/start.ts';
import { silentLogger } from '../../lib/log.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import type { Model } from '../../lib/ports.ts';
import type { ManualClock } from './manual-clock.ts';
import { removeTempDir, tempDir } from './temp-dirs.ts';

export const VISIBILITY_MS = 30_000;

export { ManualClock } from './manual-clock.ts';

export class SimulatedCrash extends Error {
  constructor(readonly point: CrashPoint, readonly step: number) {
    super(`simulated crash at ${point} (step ${step})`);
  }
}

/** A temporary database file shared by the "processes" of one test. */
export function tempDb(): { path: string; cleanup(): void } {
  const dir = tempDir('stepwise-test-');
  return { path: join(dir, 'stepwise.db'), cleanup: () => removeTempDir(dir) };
}

/**
 * One worker "process": its own connection to the database file, its own worker id. Creating a new one
 * after a crash is a restart: nothing survives but what was written to the file.
 */
export function workerProcess(input: {
  dbPath: string; agent: AgentDefinition; model: Model; clock: ManualClock; workerId: string;
  crashAt?: { point: CrashPoint; step: number };
  /**
   * false: the engine's store does not carry queue work, so a step's send and ack are their own
   * transactions after the checkpoint, as on AWS (default: the local runtime's one transaction).
   */
  queueInCommit?: boolean;
}): { deps: EngineDeps; runtime: LocalRuntime } {
  const runtime = openLocalRuntime({ dbPath: input.dbPath, clock: input.clock });
  const deps: EngineDeps = {
    store: input.queueInCommit === false ? new SqliteCheckpointStore(runtime.db, { clock: input.clock }) : runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
    model: input.model, agent: input.agent, clock: input.clock, workerId: input.workerId, codeVersion: 'test',
    log: silentLogger,
    ...(input.crashAt ? {
      probe: (point: CrashPoint, at: { step: number }) => {
        if (point === input.crashAt!.point && at.step === input.crashAt!.step) throw new SimulatedCrash(point, at.step);
      },
    } : {}),
  };
  return { deps, runtime };
}

/**
 * Works the queue like a worker loop until nothing is left: receive, handle, ack. A crash (a throw from
 * the probe) escapes, leaving the message in flight, as a dead process would. When only in-flight
 * messages remain, time moves past the visibility timeout so they are delivered again.
 */
export async function drain(deps: EngineDeps, runtime: LocalRuntime, clock: ManualClock, maxMessages = 1000): Promise<number> {
  let handled = 0;
  while (handled < maxMessages) {
    const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    if (!delivery) {
      if (runtime.queue.depth() === 0) return handled;
      clock.advance(VISIBILITY_MS + 1);
      continue;
    }
    const result = await handleDelivery(deps, delivery);
    if (result.action === 'ack') { if (!result.acked) await runtime.queue.ack(delivery); }
    else await runtime.queue.release(delivery, result.delayMs);
    handled++;
  }
  throw new Error(`queue not drained after ${maxMessages} messages`);
}

export async function start(deps: EngineDeps, goal = 'write the rows', runId = 'run') {
  return startRun(deps, { goal, runId });
}

export async function loadState(runtime: LocalRuntime, runId = 'run'): Promise<RunState> {
  return decodeState((await runtime.store.load(runId))!);
}
