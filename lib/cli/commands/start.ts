import type { Budget } from '../../core/state.ts';
import { startRun } from '../../engine/start.ts';
import { createLogger } from '../../log.ts';
import { systemClock } from '../../ports.ts';
import { CODE_VERSION } from '../../version.ts';
import { agentFlag, openBackend, requireAgent, storeFlags, workerId, type CliOptions } from '../context.ts';
import { assertQueueTakesAgent } from '../queue-agent.ts';

export interface StartOptions extends CliOptions {
  goal?: string;
  runId?: string;
  stepCap?: number;
  budget?: Budget;
}

/** Creates the run and enqueues its first step; a worker does the rest. No model is needed to start. */
export async function startCommand(options: StartOptions, out: (line: string) => void): Promise<number> {
  const agent = await requireAgent(options);
  const runtime = await openBackend(options, ['table', 'queue'], { create: true });
  try {
    assertQueueTakesAgent(runtime, agent, 'start');
    const id = workerId();
    const started = await startRun(
      { store: runtime.store, queue: runtime.queue, agent, clock: systemClock, workerId: id, codeVersion: CODE_VERSION, log: createLogger() },
      { goal: options.goal, ...(options.runId ? { runId: options.runId } : {}), ...(options.stepCap ? { stepCap: options.stepCap } : {}), ...(options.budget ? { budget: options.budget } : {}) },
    );
    if (started.created) {
      out(`started run ${started.runId} (agent ${agent.name}); \`stepwise worker${agentFlag(options)}${storeFlags(options)}\` works it`);
    } else {
      const stored = await runtime.store.load(started.runId);
      out(`run ${started.runId} already exists (status ${stored?.status}, version ${started.version}): nothing changed`);
    }
    return 0;
  } finally {
    runtime.close();
  }
}
