import { runWorker } from '../../engine/worker-loop.ts';
import { chooseModel, engineDeps, openBackend, requireAgent, workerId, type CliOptions } from '../context.ts';
import { progressLine } from '../progress.ts';

export interface WorkerCommandOptions extends CliOptions {
  visibilityMs?: number;
  idleExitMs?: number;
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
  runtime.local?.store.prune();
  runtime.local?.queue.prune();
  // The ready line is a stable, documented form (README): supervisors and scripts wait for it.
  out(`worker ${id} ready: agent ${agent.name}, model ${label}`);
  deps.log.info({ event: 'worker-ready', workerId: id, agent: agent.name, model: label, backend: runtime.kind }, 'worker ready');
  try {
    await runWorker(deps, runtime.queue, {
      signal: stop.signal,
      ...(options.visibilityMs ? { visibilityMs: options.visibilityMs } : {}),
      ...(options.idleExitMs !== undefined ? { idleExitMs: options.idleExitMs } : {}),
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
