import { InvalidInputError } from '../../core/errors.ts';
import { decodeState } from '../../core/codec.ts';
import { isTerminal } from '../../core/state.ts';
import type { CheckpointStore } from '../../ports.ts';
import { startRun } from '../../engine/start.ts';
import { runWorker } from '../../engine/worker-loop.ts';
import { backendKind } from '../backend.ts';
import { chooseModel, engineDeps, openBackend, requireAgent } from '../context.ts';
import { progressLine } from '../progress.ts';
import type { StartOptions } from './start.ts';

/**
 * Starts a run (or picks up an existing one) and works it in the foreground, printing each step. Other
 * workers may share the work; this returns when the run ends or waits.
 */
export async function runCommand(options: StartOptions & { visibilityMs?: number }, out: (line: string) => void): Promise<number> {
  if (backendKind(options) !== 'local') {
    throw new InvalidInputError('`stepwise run` works a run in this process on the local backend; with --backend aws use `stepwise start` and `stepwise worker`');
  }
  const agent = await requireAgent(options);
  const { model, label } = await chooseModel(agent);
  const runtime = await openBackend(options);
  const local = runtime.local!;
  const deps = engineDeps(runtime, agent, model);
  try {
    out(`model: ${label}`);
    const started = await startRun(deps, { goal: await goalOf(runtime.store, options), ...(options.runId ? { runId: options.runId } : {}), ...(options.stepCap ? { stepCap: options.stepCap } : {}), ...(options.budget ? { budget: options.budget } : {}) });
    out(started.created ? `run ${started.runId} started` : `run ${started.runId} exists at version ${started.version}: resuming it`);
    const stop = new AbortController();
    // Ctrl-C or a supervisor's SIGTERM: the step in hand finishes and is checkpointed, as a worker's does.
    let interrupted: string | undefined;
    const onSignal = (signal: NodeJS.Signals) => { interrupted = signal; stop.abort(); };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    // Another worker may finish the run; watch the store so this loop never waits forever.
    const watch = setInterval(() => {
      void runtime.store.load(started.runId).then((s) => { if (!s || s.status !== 'running') stop.abort(); });
    }, 500);
    try {
      await runWorker(deps, local.queue.forRun(started.runId), {
        signal: stop.signal, waitMs: 250,
        ...(options.visibilityMs ? { visibilityMs: options.visibilityMs } : {}),
        onHandled: (handled) => {
          const line = progressLine(handled);
          if (line) out(line);
          return handled.action === 'ack' && handled.outcome?.kind === 'advanced' && handled.outcome.state.status !== 'running';
        },
      });
    } finally {
      clearInterval(watch);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
    const final = await runtime.store.load(started.runId);
    const resume = interrupted && final?.status === 'running'
      ? ` (stopped by ${interrupted} after the step in hand; \`stepwise run --agent ${options.agent ?? '<path>'} --run-id ${started.runId}\` or a worker continues it)` : '';
    out(`run ${started.runId}: ${final?.status} at version ${final?.version}${resume}`);
    return final && isTerminal(final.status) && final.status !== 'completed' ? 1 : 0;
  } finally {
    runtime.close();
  }
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
