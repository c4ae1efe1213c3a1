import { cancelState } from './core/operate.ts';
import type { RunState, Usage } from './core/state.ts';
import type { Logger } from './log.ts';
import type { CheckpointStore, Clock } from './ports.ts';

/** Writes the cancelled checkpoint at `version`: a step boundary, or a waiting run. */
export async function commitCancel(
  deps: { store: CheckpointStore; workerId: string; codeVersion: string; log: Logger; clock: Clock },
  version: number, state: RunState, request: string, usage?: Usage,
): Promise<number> {
  const next = cancelState(state, request, deps.clock.now(), usage);
  const written = await deps.store.commit({
    runId: state.runId, expectedVersion: version, state: next, workerId: deps.workerId, codeVersion: deps.codeVersion,
  });
  deps.log.info({
    event: 'checkpoint', runId: state.runId, step: state.step, version: written.version, workerId: deps.workerId,
    bytes: written.bytes, status: 'cancelled', reason: next.reason,
  }, 'run cancelled');
  return written.version;
}
