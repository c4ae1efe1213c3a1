import { hostname } from 'node:os';
import { loadAgent, type AgentDefinition } from '../agent.ts';
import type { EngineDeps } from '../engine/deps.ts';
import { createLogger } from '../log.ts';
import { DEFAULT_DB_PATH, openLocalRuntime, type LocalRuntime } from '../local/runtime.ts';
import { InvalidInputError } from '../core/errors.ts';
import { DEFAULT_MODEL, MODEL_ENV } from '../llm/anthropic.ts';
import { selectModel } from '../llm/select-model.ts';
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

/** The model for a run: Claude with an API key, else the agent's offline model, labelled as such. */
export function chooseModel(agent: AgentDefinition): { model: Model; label: string } {
  return selectModel(agent);
}

/** The model to price usage by when a step did not record one. */
export function pricingModel(): string {
  return process.env[MODEL_ENV]?.trim() || DEFAULT_MODEL;
}

export function engineDeps(runtime: LocalRuntime, agent: AgentDefinition, model: Model, id = workerId()): EngineDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
    model, agent, clock: systemClock, workerId: id, codeVersion: CODE_VERSION,
    log: createLogger(),
  };
}
