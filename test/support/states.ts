import { idempotencyKey } from '../../lib/core/keys.ts';
import type { Decision, RunState, StepRecord } from '../../lib/core/state.ts';
import { completeStep, initialState } from '../../lib/core/transitions.ts';

export const META = { workerId: 'worker-test', codeVersion: 'test' };

export function newState(runId: string, goal = 'copy the rows'): RunState {
  return initialState({ runId, agent: 'test-agent', goal, now: 1_000 });
}

export function decisionFor(runId: string, step: number, input: unknown = { batch: step }): Decision {
  return { step, tool: 'write_row', input, idempotencyKey: idempotencyKey(runId, step), at: 2_000 + step };
}

export function recordFor(runId: string, step: number, text = `wrote row ${step}`): StepRecord {
  return { ...decisionFor(runId, step), result: { ok: true, text, bytes: Buffer.byteLength(text) }, workerId: 'worker-test' };
}

/** The state after `steps` completed steps, built with the real transitions. */
export function stateAfter(runId: string, steps: number): RunState {
  let state = newState(runId);
  for (let n = 1; n <= steps; n++) state = completeStep(state, recordFor(runId, n), 3_000 + n);
  return state;
}
