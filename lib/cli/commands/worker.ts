import { runWorker } from '../../engine/worker-loop.ts';
import { chooseModel, engineDeps, openBackend, requireAgent, workerId, type CliOptions } from '../context.ts';
import { progressLine } from '../progress.ts';

export interface WorkerCommandOptions extends CliOptions {
  visibilityMs?: number;
  idleExitMs?: number;
  stallMs?: number;
}

/** Works every run on the queue, one step per message, until SIGINT/SIGTERM (or idle, if asked). */
export async function workerCommand(options: WorkerCommandOptions, out: (line: string) => void): Promise<number> {
  const agent = await requireAgent(options);
  const { model, label } = chooseModel(agent);
  const runtime = await openBackend(options);
  const id = workerId();
  const deps = engineDeps(runtime, agent, model, id);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  out(`worker ${id} started: agent ${agent.name}, model ${label}`);
  runtime.local?.store.prune();
  runtime.local?.queue.prune();
  try {
    await runWorker(deps, runtime.queue, {
      signal: stop.signal,
      ...(options.visibilityMs ? { visibilityMs: options.visibilityMs } : {}),
      ...(options.idleExitMs !== undefined ? { idleExitMs: options.idleExitMs } : {}),
      ...(options.stallMs ? { stallMs: options.stallMs } : {}),
      onHandled: (handled) => {
        const line = progressLine(handled);
        if (line) out(line);
      },
    });
    out(`worker ${id} stopped`);
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    runtime.close();
  }
}
