import { decodeState, type StoredCheckpoint } from '../../core/codec.ts';
import { InvalidInputError } from '../../core/errors.ts';
import { RETRYABLE_STATUSES } from '../../core/operate.ts';
import { isTerminal, type Budget } from '../../core/state.ts';
import { startRun, unappliedStartOptions } from '../../engine/start.ts';
import { createLogger } from '../../log.ts';
import { systemClock } from '../../ports.ts';
import { CODE_VERSION } from '../../version.ts';
import { agentFlag, openBackend, requireAgent, storeFlags, workerId, type CliOptions } from '../context.ts';
import { assertQueueTakesAgent } from '../queue-agent.ts';
import { budgetText, oneLine } from '../format.ts';
import { sendAgainWith } from '../message-not-sent.ts';

export interface StartOptions extends CliOptions {
  goal?: string;
  runId?: string;
  stepCap?: number;
  budget?: Budget;
}

/** Creates the run and enqueues its first step; a worker does the rest. No model is needed to start. */
export async function startCommand(options: StartOptions, out: (line: string) => void): Promise<number> {
  // Left out, the goal reached startRun as none and was refused as "the goal is empty", sending the user
  // to look for a --goal "" they never typed.
  if (options.goal === undefined) throw new InvalidInputError('--goal "what the run should achieve" is required');
  const agent = await requireAgent(options);
  const runtime = await openBackend(options, ['table', 'queue'], { create: true });
  try {
    assertQueueTakesAgent(runtime, agent, 'start');
    const id = workerId();
    const started = await startRun(
      { store: runtime.store, queue: runtime.queue, agent, clock: systemClock, workerId: id, codeVersion: CODE_VERSION, log: createLogger({ agent: agent.name }) },
      { goal: options.goal, ...(options.runId ? { runId: options.runId } : {}), ...(options.stepCap ? { stepCap: options.stepCap } : {}), ...(options.budget ? { budget: options.budget } : {}) },
    ).catch(sendAgainWith('start'));
    if (started.created) {
      out(`started run ${started.runId} (agent ${agent.name}); \`stepwise worker${agentFlag(options)}${storeFlags(options)}\` works it`);
    } else {
      const stored = await runtime.store.load(started.runId);
      const unapplied = stored && unappliedStartText(stored, options);
      out(`run ${started.runId} already exists (status ${stored?.status}, version ${started.version}): nothing changed${unapplied ? ` (${unapplied})` : ''}`);
    }
    return 0;
  } finally {
    runtime.close();
  }
}

/**
 * A goal, step cap or budget given for a run that already exists is not applied (a repeated start changes
 * nothing): what the run keeps instead, so what was asked for is never silently dropped, and what sets it
 * (retry only where the run's status allows one). Undefined when none was given, or the run has it already.
 */
export function unappliedStartText(stored: StoredCheckpoint, options: Pick<StartOptions, 'goal' | 'stepCap' | 'budget'>): string | undefined {
  let state;
  try { state = decodeState(stored); } catch { return undefined; } // unreadable: status and history say why
  const unapplied = unappliedStartOptions(state, options);
  const parts: string[] = [];
  if (unapplied.includes('goal')) {
    parts.push(`--goal applies only to a new run: it keeps its goal ${JSON.stringify(oneLine(state.goal, 80))}; \`stepwise fork\` with --goal starts from its steps with another`);
  }
  if (unapplied.includes('stepCap') || unapplied.includes('budget')) {
    const sets = RETRYABLE_STATUSES.includes(state.status) ? '`stepwise retry` or `fork` sets them'
      : isTerminal(state.status) ? '`stepwise fork` sets them' : '`stepwise retry` or `fork` sets them once it stops';
    parts.push(`--step-cap and --budget-* apply only to a new run: it keeps step cap ${state.stepCap} and ${state.budget ? `budget ${budgetText(state.budget)}` : 'no budget'}; ${sets}`);
  }
  return parts.length ? parts.join('; ') : undefined;
}
