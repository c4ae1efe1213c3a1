import { worksRunsOf } from '../agent.ts';
import { recordedAgentOf } from '../engine/operate/load.ts';
import type { HttpDeps } from './deps.ts';

/**
 * Why this app must not operate the run, or undefined when it may. On AWS the queue is this agent's alone:
 * answering, retrying, cancelling or forking a run of another agent sharing the table would send its next
 * message here, where none of its workers read (handed back as `wrong-agent` until it reached the
 * dead-letter queue). Locally one queue carries every agent's messages, and any caller resumes any run.
 * A run that is not there, or cannot be read, is the operation's own error to give.
 */
export async function otherAgentsRun(deps: HttpDeps, runId: string): Promise<string | undefined> {
  if (!deps.agentQueue) return undefined;
  const agent = await recordedAgentOf(deps.store, runId);
  if (agent === undefined || worksRunsOf(deps.agent, agent)) return undefined;
  return `run ${runId} belongs to agent "${agent}", not "${deps.agent.name}": operate it through that agent's API, whose queue its workers read`;
}
