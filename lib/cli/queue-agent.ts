import { agentNames, type AgentDefinition } from '../agent.ts';
import { recordedAgentOf } from '../engine/operate/load.ts';
import { InvalidInputError } from '../core/errors.ts';
import type { Backend, CliOptions, QueueAgent } from './backend.ts';
import { requireAgent } from './context.ts';

/**
 * On AWS agents may share the table, but each has its own queue, read by its workers alone: a command that
 * sends a run's next message to another agent's queue leaves the run to stall until its own sweeper finds it
 * (15 minutes), and the message to that agent's dead-letter queue. So the commands check whose queue it is,
 * when that is known: from the stack's AgentNames output, else from the agent the command names (--agent or
 * STEPWISE_AGENT). Locally there is one queue, and every message carries its run's agent: no check.
 */
export async function queueAgentOf(backend: Backend, options: CliOptions): Promise<QueueAgent | undefined> {
  if (backend.kind !== 'aws') return undefined;
  if (backend.queueAgent) return backend.queueAgent;
  if (!options.agent && !process.env.STEPWISE_AGENT?.trim()) return undefined;
  return { names: agentNames(await requireAgent(options)), source: options.agent ? '--agent' : 'STEPWISE_AGENT' };
}

/** Refuses a run this queue's workers would not take: answering, retrying, cancelling or forking it here. */
export async function assertQueueTakesRun(backend: Backend, queueAgent: QueueAgent | undefined, runId: string): Promise<void> {
  if (!queueAgent) return;
  // A run that is not there, or cannot be read, is the command's own error to give.
  const agent = await recordedAgentOf(backend.store, runId);
  if (agent === undefined || queueAgent.names.includes(agent)) return;
  throw new InvalidInputError(
    `run ${runId} belongs to agent "${agent}", but this queue is agent "${queueAgent.names[0]}"'s (${queueAgent.source}), whose workers would not take it: `
    + `name the stack or queue of agent "${agent}" (--stack, --queue-url)`,
  );
}

/**
 * Refuses an agent whose runs this queue's workers would not take: starting runs of it (start, serve), or
 * working the queue with it (worker, which would hand back every message).
 */
export function assertQueueTakesAgent(backend: Backend, agent: AgentDefinition, use: 'start' | 'work'): void {
  const queueAgent = backend.queueAgent;
  if (!queueAgent) return;
  const takes = use === 'start' ? queueAgent.names.includes(agent.name) : agentNames(agent).some((name) => queueAgent.names.includes(name));
  if (takes) return;
  throw new InvalidInputError(
    `${queueAgent.source}'s queue is agent "${queueAgent.names[0]}"'s, and the agent loaded is "${agent.name}": `
    + (use === 'start' ? 'its workers would not take runs of it' : 'this worker would hand back every run on it')
    + `; name agent "${agent.name}"'s own stack, or deploy it to this one first`,
  );
}
