import { InvalidInputError } from '../../core/errors.ts';
import { decodeState } from '../../core/codec.ts';
import { isTerminal, type WaitRecord } from '../../core/state.ts';
import { startRun } from '../../engine/start.ts';
import { openLocalEngine } from '../../local/engine.ts';
import type { CheckpointStore } from '../../ports.ts';
import { backendKind, storeFlags } from '../backend.ts';
import { agentFlag, dbPath, requireAgent } from '../context.ts';
import { answerCommand } from '../format.ts';
import { progressLine } from '../progress.ts';
import { onExitInStep } from '../exit-in-step.ts';
import { onStopSignals } from '../stop-signals.ts';
import { unappliedStartText, type StartOptions } from './start.ts';

/**
 * Starts a run (or picks up an existing one) and works it in the foreground, printing each step. Other
 * workers may share the work; this returns when the run ends or waits.
 */
export async function runCommand(options: StartOptions & { visibilityMs?: number }, out: (line: string) => void): Promise<number> {
  if (backendKind(options) !== 'local') {
    throw new InvalidInputError('`stepwise run` works a run in this process on the local backend; with --backend aws use `stepwise start` and `stepwise worker`');
  }
  // As for start: without either, "the goal is empty" named a --goal "" never typed.
  if (options.goal === undefined && !options.runId) throw new InvalidInputError('--goal "what the run should achieve" is required, or --run-id of a run to work on');
  // Ctrl-C or a supervisor's SIGTERM: the step in hand finishes and is checkpointed, as a worker's does.
  // Taken before the agent loads, as the worker's are: after, one sent meanwhile to a `run` that is PID 1
  // was lost, and the run was worked on as if never stopped.
  const stop = new AbortController();
  let interrupted: string | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    // Said at once: the step in hand may take minutes (a tool's limit is 15), and silence reads as a hang.
    out(`stopping (${signal}): the step in hand finishes and is checkpointed first; ${signal} again stops at once`);
    interrupted = signal;
    stop.abort();
  };
  const offSignals = onStopSignals(onSignal);
  try {
    return await runAfterSignals(options, out, stop.signal, () => interrupted);
  } finally {
    offSignals();
  }
}

async function runAfterSignals(
  options: StartOptions & { visibilityMs?: number }, out: (line: string) => void, signal: AbortSignal, interrupted: () => string | undefined,
): Promise<number> {
  const agent = await requireAgent(options);
  const engine = await openLocalEngine(agent, { dbPath: dbPath(options) });
  try {
    if (signal.aborted) {
      out(`stopped (${interrupted()}) before the run was started or worked`);
      return 0;
    }
    out(`model: ${engine.modelLabel}`);
    const started = await startRun(engine.deps, { goal: await goalOf(engine.runtime.store, options), ...(options.runId ? { runId: options.runId } : {}), ...(options.stepCap ? { stepCap: options.stepCap } : {}), ...(options.budget ? { budget: options.budget } : {}) });
    if (!started.created) {
      // Worked on, it would spend past the limit asked for: nothing is worked until the flags agree.
      const stored = await engine.runtime.store.load(started.runId);
      const unapplied = stored && unappliedStartText(stored, options);
      if (unapplied) throw new InvalidInputError(`run ${started.runId} exists, so it was not worked: ${unapplied}; leave them out to work it on as it is`);
    }
    out(started.created ? `run ${started.runId} started` : `run ${started.runId} exists at version ${started.version}: resuming it`);
    const offExit = onExitInStep(engine.deps.log, {}, () => [started.runId], (code, runId, cause) =>
      `stepwise run exited (code ${code}) before run ${runId} had ended; \`stepwise run${agentFlag(options)}${storeFlags(options)} --run-id ${runId}\` or a worker continues it once its message's visibility timeout has passed; ${cause ?? 'a tool that calls process.exit, or throws from a timer or a promise nobody awaits, ends the process so'}`);
    let final;
    try {
      final = await engine.work(started.runId, {
        signal,
        ...(options.visibilityMs ? { visibilityMs: options.visibilityMs } : {}),
        onHandled: (handled) => {
          const line = progressLine(handled);
          if (line) out(line);
        },
      });
    } finally {
      offExit();
    }
    const { status } = final.state;
    const again = `\`stepwise run${agentFlag(options)}${storeFlags(options)} --run-id ${started.runId}\``;
    const resume = interrupted() && status === 'running' ? ` (stopped by ${interrupted()} after the step in hand; ${again} or a worker continues it)`
      : status === 'waiting' && final.state.wait ? ` (${waitingHint(final.state.wait, started.runId, agentFlag(options), storeFlags(options))}; then ${again} or a worker continues it)` : '';
    out(`run ${started.runId}: ${status} at version ${final.version}${resume}`);
    // 3, as drift's "runs it cannot resume": the run ended without completing, which a script tells
    // apart from exit 1, stepwise or its environment failing (the run may then be fine, and continue).
    return isTerminal(status) && status !== 'completed' ? 3 : 0;
  } finally {
    engine.close();
  }
}

/** What ends a wait `run` stopped at: the command that answers it, or the time a worker takes it up. */
export function waitingHint(wait: WaitRecord, runId: string, agentFlag: string, store = ''): string {
  const answer = answerCommand(runId, wait);
  if (!answer) return `it wakes at ${new Date(wait.deadline).toISOString()}`;
  return `answer with \`${answer}${store}\`${wait.kind === 'approval' ? `, or open the link while \`stepwise serve${agentFlag}${store}\` runs` : ''}`;
}

/** `run --run-id id` without --goal resumes that run: its goal is the one it was started with. */
async function goalOf(store: CheckpointStore, options: StartOptions): Promise<unknown> {
  if (options.goal !== undefined || !options.runId) return options.goal;
  const stored = await store.load(options.runId);
  if (!stored) throw new InvalidInputError(`run ${options.runId} does not exist: give --goal to start it`);
  try {
    return decodeState(stored).goal;
  } catch {
    return options.runId; // unreadable: startRun leaves an existing run as it is whatever the goal, and the worker says why
  }
}
