import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { InvalidInputError } from './core/errors.ts';
import type { Model, ModelSettings, ToolSpec } from './ports.ts';
import type { EventTrigger, IncomingEvent } from './core/waits.ts';

/** What a tool receives besides its input. */
export interface ToolContext {
  runId: string;
  step: number;
  /** 1 on the first try of this step; counts retries recorded after failures. */
  attempt: number;
  /** `${runId}/step-${step}`: the same on every retry of this step, on any worker. */
  idempotencyKey: string;
  /**
   * Runs `effect` at most once for this step's key and input, returning the remembered result on a retry.
   * A reused key with different input is an error. An effect that can take the key itself (a unique
   * column, a request header) is stronger still: it stays exact even across a crash inside `effect`.
   */
  once<T>(effect: () => Promise<T>): Promise<T>;
}

export interface ToolDefinition<I = any> {
  name: string;
  description: string;
  input: z.ZodType<I>;
  /** True if the tool changes anything outside the run: its decision is recorded before it runs. */
  sideEffect: boolean;
  run(input: I, context: ToolContext): unknown;
}

export interface AgentSettings extends ModelSettings {
  stepCap?: number;
  /** Tool outputs above this many bytes are stored by reference. */
  inlineLimit?: number;
}

export interface AgentDefinition {
  name: string;
  tools: ToolDefinition[];
  settings?: AgentSettings;
  /** A model that needs no network, used when no API key is configured (demos, tests). */
  offlineModel?: () => Model;
  /** Events that start a run of this agent (functions/events.ts on AWS): an S3 object created, an app event. */
  startOn?: EventTrigger[];
  /** How an incoming event names the waits it resumes; default: detail-type and `detail.key`. */
  eventKey?: (event: IncomingEvent) => { type: string; key: string } | undefined;
}

export function tool<I>(definition: ToolDefinition<I>): ToolDefinition<I> {
  return definition;
}

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

export function defineAgent(definition: AgentDefinition): AgentDefinition {
  if (!definition.name) throw new InvalidInputError('an agent needs a name');
  const seen = new Set<string>();
  for (const t of definition.tools) {
    if (!TOOL_NAME.test(t.name)) throw new InvalidInputError(`tool name ${JSON.stringify(t.name)} must match ${TOOL_NAME}`);
    if (seen.has(t.name)) throw new InvalidInputError(`tool ${t.name} is defined twice`);
    seen.add(t.name);
  }
  return definition;
}

const specs = new WeakMap<AgentDefinition, ToolSpec[]>();

/** The tools as the model sees them; computed once per agent, since every step sends them. */
export function toolSpecs(agent: AgentDefinition): ToolSpec[] {
  let cached = specs.get(agent);
  if (!cached) {
    cached = agent.tools.map((t) => {
      const { $schema: _ignored, ...schema } = z.toJSONSchema(t.input) as Record<string, unknown>;
      return { name: t.name, description: t.description, inputSchema: schema };
    });
    specs.set(agent, cached);
  }
  return cached;
}

/** Loads an agent module (TypeScript or JavaScript): its default export, or an export named `agent`. */
export async function loadAgent(path: string): Promise<AgentDefinition> {
  const mod = (await import(pathToFileURL(resolve(path)).href)) as { default?: unknown; agent?: unknown };
  const candidate = (mod.agent ?? mod.default) as AgentDefinition | undefined;
  if (!candidate || typeof candidate !== 'object' || !Array.isArray(candidate.tools) || !candidate.name) {
    throw new InvalidInputError(`${path} does not export an agent (export default defineAgent({...}))`);
  }
  return defineAgent(candidate);
}
