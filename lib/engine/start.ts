import { randomUUID } from 'node:crypto';
import { worksRunsOf } from '../agent.ts';
import { decodeState } from '../core/codec.ts';
import { InvalidInputError } from '../core/errors.ts';
import { checkBudget } from '../core/operate.ts';
import { MAX_GOAL_BYTES, type Budget } from '../core/state.ts';
import { initialState } from '../core/transitions.ts';
import type { EngineDeps } from './deps.ts';

export const RUN_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export interface StartResult {
  runId: string;
  created: boolean;
  version: number;
}

export function validateGoal(goal: unknown): string {
  if (typeof goal !== 'string' || goal.trim() === '') throw new InvalidInputError('the goal is empty: say what the run should achieve');
  const bytes = Buffer.byteLength(goal);
  if (bytes > MAX_GOAL_BYTES) throw new InvalidInputError(`the goal is ${bytes} bytes; the limit is ${MAX_GOAL_BYTES}. Put large inputs in a tool's data and refer to them`);
  return goal;
}

export function validateRunId(runId: string): string {
  if (!RUN_ID_PATTERN.test(runId)) throw new InvalidInputError(`run id ${JSON.stringify(runId)} must match ${RUN_ID_PATTERN}`);
  return runId;
}

/**
 * Creates a run (version 1) and enqueues its first step. Starting an existing run id changes nothing in
 * the run; if it is running, it re-drives the message for its latest version: a no-op while that message
 * is live, and a way past the deduplication record if the message was consumed without a successor.
 */
export async function startRun(
  deps: Pick<EngineDeps, 'store' | 'queue' | 'agent' | 'clock' | 'workerId' | 'codeVersion' | 'log'>,
  input: { goal: unknown; runId?: string; stepCap?: number; budget?: Budget },
): Promise<StartResult> {
  const goal = validateGoal(input.goal);
  const runId = validateRunId(input.runId ?? randomUUID());
  const stepCap = input.stepCap ?? deps.agent.settings?.stepCap;
  if (stepCap !== undefined && (!Number.isInteger(stepCap) || stepCap < 1)) throw new InvalidInputError(`step cap must be a positive integer, got ${stepCap}`);
  const budget = input.budget ?? deps.agent.settings?.budget;
  const state = initialState({
    runId, agent: deps.agent.name, goal, now: deps.clock.now(), ...(stepCap ? { stepCap } : {}), ...(budget ? { budget: checkBudget(budget) } : {}),
  });
  const created = await deps.store.create(state, { workerId: deps.workerId, codeVersion: deps.codeVersion });
  if (created.created) {
    deps.log.info({ event: 'checkpoint', runId, step: 0, version: 1, workerId: deps.workerId, bytes: created.bytes, status: 'running' }, 'run created');
  }
  const latest = created.created ? undefined : await deps.store.load(runId);
  if (latest) {
    let agent: string | undefined;
    try { agent = decodeState(latest).agent; } catch { agent = undefined; } // unreadable: status and history say why
    if (agent !== undefined && !worksRunsOf(deps.agent, agent)) {
      throw new InvalidInputError(`run ${runId} belongs to agent "${agent}", not "${deps.agent.name}": use that agent's module or another run id; if "${agent}" was renamed to "${deps.agent.name}", add formerNames: ["${agent}"] to its defineAgent`);
    }
  }
  if (created.created) await deps.queue.send({ runId, version: created.version });
  else if (latest?.status === 'running') await deps.queue.redrive({ runId, version: latest.version });
  return { runId, created: created.created, version: latest?.version ?? created.version };
}
