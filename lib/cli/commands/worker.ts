import { agentNames } from '../../agent.ts';
import { sweepRunsAndTimers } from '../../engine/sweep.ts';
import { parseMessage } from '../../engine/handle-message.ts';
import { runWorker } from '../../engine/worker-loop.ts';
import { describeRefusal } from '../../aws/refusal.ts';
import { DEFAULT_SWEEPER_STALL_MS } from '../../settings.ts';
import { chooseModel, engineDeps, openBackend, requireAgent, workerId, workerLog, type CliOptions } from '../context.ts';
import { assertQueueTakesAgent } from '../queue-agent.ts';
import { progressLine } from '../progress.ts';
import { onExitInStep } from '../exit-in-step.ts';
import { onStopSignals } from '../stop-signals.ts';
import { stopsLocalWorker } from '../../local/newer-layout.ts';
import { describeFullDiskStep, describeLocalRefusal } from '../../local/disk-full.ts';
import type { Delivery } from '../../ports.ts';

export interface WorkerCommandOptions extends CliOptions {
  visibilityMs?: number;
  idleExitMs?: number;
  stallMs?: number;
  /** Steps at once in this process, each on its own run (runWorker's option; default 1). */
  concurrency?: number;
}

/** Works every run on the queue, one step per message, until SIGINT/SIGTERM (or idle, if asked). */
export async function workerCommand(options: WorkerCommandOptions, out: (line: string) => void): Promise<number> {
  const id = workerId();
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    // Said at once: the steps in hand may take minutes (a tool's limit is 15), and silence reads as a hang.
    out(`worker ${id} stopping (${signal}): the steps in hand finish and are checkpointed first, what it received is handed back; ${signal} again stops it at once`);
    stop.abort();
  };
  // Before the agent loads, which may take seconds (a large agent, a slow disk): taken after, a SIGTERM
  // sent meanwhile to a worker that is PID 1 (a container with no init) was lost, as the kernel never takes
  // a signal's default action there, and the worker then ran on as if never told to stop.
  const offSignals = onStopSignals(onSignal);
  try {
    return await workAfterSignals(options, out, id, stop);
  } finally {
    offSignals();
  }
}

async function workAfterSignals(options: WorkerCommandOptions, out: (line: string) => void, id: string, stop: AbortController): Promise<number> {
  const agent = await requireAgent(options);
  const { model, label } = await chooseModel(agent);
  const log = workerLog(agent, id);
  const runtime = await openBackend(options, ['table', 'queue', 'bucket'], { create: true, log });
  try {
    assertQueueTakesAgent(runtime, agent, 'work');
    // Refused before the ready line, where the first receive refused it after: a supervisor counted up a
    // worker that stopped at once (exit 2). Imported on AWS only: the SDK is not loaded locally.
    if (runtime.kind === 'aws' && options.visibilityMs) (await import('../../aws/sqs-run-queue.ts')).assertSqsVisibility(options.visibilityMs);
  } catch (error) {
    runtime.close();
    throw error;
  }
  if (stop.signal.aborted) {
    // Told to stop while it loaded: it has received nothing, so nothing is finished or handed back.
    runtime.close();
    out(`worker ${id} stopped before it was ready`);
    return 0;
  }
  const deps = engineDeps(runtime, agent, model, id, log);
  if (runtime.local) (await import('../../local/prune.ts')).pruneAtStart(runtime.local, deps.log);
  // A -wal another connection keeps from being copied back grows with every step, unseen until the disk fills.
  const walWatch = runtime.local ? (await import('../../local/wal-watch.ts')).watchWal(runtime.local.db.name, deps.log) : undefined;
  walWatch?.look();
  // Locally, several agents share the file: this worker receives only its agent's messages. On AWS each
  // agent has its own queue; the engine hands back any other agent's message all the same.
  const names = agentNames(agent);
  const consumer = runtime.local ? runtime.local.queue.forAgents(names) : runtime.queue;
  const others = runtime.local?.queue.waitingForOthers(names) ?? [];
  if (others.length) {
    // Said once at start: legitimate when those agents have workers, the sign of a rename when not.
    const count = others.reduce((n, o) => n + o.messages, 0);
    const list = others.map((o) => `${o.agent}: ${o.messages}`).join(', ');
    const renamed = others.length === 1 ? `"${others[0]!.agent}"` : 'one of them';
    const former = others.length === 1 ? `["${others[0]!.agent}"]` : '[...]';
    deps.log.warn(
      { event: 'other-agents-waiting', workerId: id, waiting: others },
      `${count} queued message${count === 1 ? ' belongs' : 's belong'} to other agents (${list}); this worker (agent "${agent.name}") leaves them for their workers. If ${renamed} was renamed to "${agent.name}", add formerNames: ${former} to its defineAgent`,
    );
  }
  const inHand = new Set<Delivery>();
  const offExit = onExitInStep(deps.log, { workerId: id }, () => [...inHand].map(runOf), (code, runs, cause) =>
    `worker ${id} exited (code ${code}) in the middle of a step of run ${runs}, which is tried again once its message's visibility timeout has passed; ${cause ?? 'a tool that calls process.exit, or throws from a timer or a promise nobody awaits, ends its worker so'}`);
  // The ready line is a stable, documented form (README): supervisors and scripts wait for it.
  out(`worker ${id} ready: agent ${agent.name}, model ${label}`);
  deps.log.info({ event: 'worker-ready', workerId: id, model: label, backend: runtime.kind, concurrency: options.concurrency ?? 1 }, 'worker ready');
  try {
    await runWorker(deps, consumer, {
      signal: stop.signal,
      ...(options.visibilityMs ? { visibilityMs: options.visibilityMs } : {}),
      ...(options.idleExitMs !== undefined ? { idleExitMs: options.idleExitMs } : {}),
      ...(options.stallMs ? { stallMs: options.stallMs } : {}),
      ...(options.concurrency ? { concurrency: options.concurrency } : {}),
      inHand,
      // A damaged file, or one a newer release brought forward under it, stops the worker (exit 2, with
      // what to do), where it retried each step for good.
      // A step the file's lock refused is said as that, with who may hold it, where the line read only
      // SQLite's "database is locked"; one a full disk refused, as that, with what to do. A receive the full
      // disk refuses takes nothing, and the worker polls on until space is freed, where it stopped (exit 1).
      ...(runtime.kind === 'local' ? { stopOn: stopsLocalWorker, refusal: describeLocalRefusal, receiveRefusal: describeFullDiskStep } : {}),
      // SQS cannot show which runs have a message, nor hold a timer for days: without the sweeper
      // function (off Lambda), this worker does its work, for its agent's runs.
      ...(runtime.kind === 'aws' ? {
        sweep: () => sweepRunsAndTimers(deps, { stallMs: options.stallMs ?? DEFAULT_SWEEPER_STALL_MS, agents: names }),
        // A refused permission or KMS key was logged as a fault that passes, in AWS's often bare words.
        refusal: describeRefusal,
      } : {}),
      onHandled: (handled) => {
        const line = progressLine(handled);
        if (line) out(line);
      },
    });
    // Not told to stop, it ended by --idle-exit-ms: a supervisor (or a person) that sees a worker gone
    // without a signal reads why, where the same bare line as a stop left it to guess at a crash.
    const idle = !stop.signal.aborted;
    out(`worker ${id} stopped${idle ? `: no step to work for ${options.idleExitMs} ms (--idle-exit-ms)` : ''}`);
    // The ready line's pair, for a supervisor reading the JSON logs.
    deps.log.info({ event: 'worker-stopped', workerId: id, backend: runtime.kind, reason: idle ? 'idle' : 'signal' }, 'worker stopped');
    return 0;
  } finally {
    offExit();
    walWatch?.stop();
    runtime.close();
  }
}

/** The run a delivery is for, as the exit line names it. */
function runOf(delivery: Delivery): string {
  if (delivery.message) return delivery.message.runId;
  const parsed = parseMessage(delivery.body);
  return parsed.success ? parsed.data.runId : JSON.stringify(delivery.body.slice(0, 100));
}
