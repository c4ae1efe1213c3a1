import { hostname, userInfo } from 'node:os';
import type { AwsRuntime } from '../aws/runtime.ts';
import type { OperateDeps } from '../engine/operate/deps.ts';
import { loadAgent, type AgentDefinition } from '../agent.ts';
import { processWorkerId, type EngineDeps } from '../engine/deps.ts';
import { createLogger, withFields, type Logger } from '../log.ts';
import { InvalidInputError } from '../core/errors.ts';
import type { Model } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { CODE_VERSION } from '../version.ts';
import type { Backend } from './backend.ts';
import { shellWord } from './format.ts';

export { dbPath, openBackend, storeFlags, type Backend, type CliOptions } from './backend.ts';
export { chooseModel } from '../llm/choose-model.ts';

export const workerId = processWorkerId;

/**
 * The agent as a next command names it, found the way requireAgent finds it: its `--agent` given, none
 * when STEPWISE_AGENT names it (the next command reads it too), else a placeholder to fill in.
 */
export function agentFlag(options: { agent?: string }): string {
  if (options.agent) return ` --agent ${shellWord(options.agent)}`;
  return process.env.STEPWISE_AGENT ? '' : ' --agent <path>';
}

export async function requireAgent(options: { agent?: string }): Promise<AgentDefinition> {
  const path = options.agent ?? process.env.STEPWISE_AGENT;
  if (!path) throw new InvalidInputError('--agent path/to/agent.ts is required (or set STEPWISE_AGENT)');
  await typescriptLoaderFor(path);
  return loadAgent(path);
}

/**
 * The built CLI runs without a TypeScript loader; an agent written in TypeScript gets one (tsx) registered
 * just before it loads. The sources in a checkout already run under tsx (bin/stepwise.js), as under vitest.
 * Both of tsx's hooks: in a CommonJS package (`npm init` makes one) a .ts agent is CommonJS, and with
 * only the ESM hook Node would try to require it as an ES module.
 */
async function typescriptLoaderFor(path: string): Promise<void> {
  if (!/\.[cm]?ts$/.test(path) || import.meta.url.endsWith('.ts') || tsxRegistered) return;
  const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
  esm.register();
  cjs.register();
  tsxRegistered = true;
}
let tsxRegistered = false;

/** What operating runs by hand needs (show, fork, retry, cancel): the ports, no agent, no model. */
export function operateDeps(runtime: Backend): OperateDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: systemClock,
    workerId: `cli-${workerId()}`, codeVersion: CODE_VERSION, log: createLogger(),
    ...(runtime.waits.notifier ? { notifier: runtime.waits.notifier } : {}),
  };
}

/** Who is at this terminal, for a cancel's record when --as does not say. */
export function operator(): string {
  try {
    return `${userInfo().username}@${hostname()}`;
  } catch {
    return `cli@${hostname()}`;
  }
}

export function engineDeps(runtime: Backend, agent: AgentDefinition, model: Model, id = workerId(), log = workerLog(agent, id)): EngineDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
    model, agent, clock: systemClock, workerId: id, codeVersion: CODE_VERSION,
    log, waits: runtime.waits,
  };
}

/**
 * A worker's logger: every line names the agent, as on Lambda (one file or stack serves several agents'
 * workers), and the worker, as on Lambda: the engine's lines that act on a run (a refused model key, a step
 * that did not finish) named it only in a checkpoint, where several worker processes write to one log.
 */
export function workerLog(agent: AgentDefinition, id: string): Logger {
  return withFields(createLogger({ agent: agent.name }), { workerId: id });
}
