import { hostname } from 'node:os';
import { loadAgent, type AgentDefinition } from '../agent.ts';
import type { EngineDeps } from '../engine/deps.ts';
import { createLogger } from '../log.ts';
import { DEFAULT_DB_PATH, openLocalRuntime, type LocalRuntime } from '../local/runtime.ts';
import { InvalidInputError } from '../core/errors.ts';
import type { Model } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { CODE_VERSION } from '../version.ts';

export interface CliOptions {
  db?: string;
  agent?: string;
}

export function dbPath(options: CliOptions): string {
  return options.db ?? process.env.STEPWISE_DB ?? DEFAULT_DB_PATH;
}

export function openRuntime(options: CliOptions): LocalRuntime {
  return openLocalRuntime({ dbPath: dbPath(options) });
}

export const workerId = (): string => `${hostname()}-${process.pid}`;

export async function requireAgent(options: CliOptions): Promise<AgentDefinition> {
  const path = options.agent ?? process.env.STEPWISE_AGENT;
  if (!path) throw new InvalidInputError('--agent path/to/agent.ts is required (or set STEPWISE_AGENT)');
  return loadAgent(path);
}

/** The model for a run: the agent's offline model when there is no API key. */
export function chooseModel(agent: AgentDefinition): { model: Model; label: string } {
  if (agent.offlineModel) {
    const model = agent.offlineModel();
    return { model, label: `offline scripted model "${model.name}" (no ANTHROPIC_API_KEY)` };
  }
  throw new InvalidInputError(`agent ${agent.name} has no offline model and no model is configured`);
}

export function engineDeps(runtime: LocalRuntime, agent: AgentDefinition, model: Model, id = workerId()): EngineDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
    model, agent, clock: systemClock, workerId: id, codeVersion: CODE_VERSION,
    log: createLogger(),
  };
}
