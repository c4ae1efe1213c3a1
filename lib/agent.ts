import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as z from 'zod';
import { InvalidInputError } from './core/errors.ts';
import { checkToolApproval, type ToolApproval } from './core/approval-gate.ts';
import type { Model, ModelSettings, OnceOptions, ToolSpec } from './ports.ts';
import type { EventTrigger, IncomingEvent } from './core/waits.ts';
import { budgetSchema, type Budget } from './core/state.ts';
import { MAX_TOOL_TIMEOUT_MS } from './settings.ts';

/** What a tool receives besides its input. */
export interface ToolContext {
  runId: string;
  step: number;
  /**
   * 1 on the first try of this step, 2 on the next, whether the first failed or its worker was killed.
   * Never too low; it can be one too high when the message's first delivery never reached the step
   * (the store was unavailable), so a tool that checks for its own earlier effect on attempt > 1 is safe.
   */
  attempt: number;
  /** `${runId}/step-${step}`: the same on every retry of this step, on any worker. */
  idempotencyKey: string;
  /**
   * Runs `effect` at most once for this step's key and input while this worker lives, returning the
   * remembered result on a retry; a reused key with different input is an error. The result is returned
   * as JSON reads it back (a Date as its ISO string), on the first try as on a retry. The claim on the key
   * lasts `leaseMs` (default 60 s) and is renewed while the effect runs; another attempt of the step
   * waits for it instead of failing. If the worker dies inside `effect`, the effect may or may not have
   * happened, and after the lease it runs again: only an effect that takes the key itself (a unique
   * column in the same transaction, an idempotency header) stays exact then. `signal` aborts if this
   * worker lost the claim (it froze past its lease and another attempt took the key). One effect per
   * step: a second `once` in the same try, after the first was applied or while it runs (nested, or not
   * awaited), fails the run with a PermanentError; once more after a failed effect is a retry of it. A tool
   * that returns before its `once` settles fails the run too, and `once` after the tool returned is refused. Only
   * in a tool with `sideEffect: true`: elsewhere it fails the run at once, saying so. `effect` may return
   * its result or a promise of it: a synchronous one (better-sqlite3's transactions) is applied the same
   * way, and its throw is a failed effect, but the claim is renewed only while the effect awaits.
   */
  once<T>(effect: (signal: AbortSignal) => T | Promise<T>, options?: OnceOptions): Promise<T>;
  /**
   * Aborts when this try runs out of time (the tool's `timeoutMs`, or the worker's own deadline): hand it
   * to fetch and the like. The try has failed by then, whatever the tool still does; a claim `once` holds
   * is no longer renewed, so the step's next try can take the key when its lease ends.
   */
  readonly signal: AbortSignal;
  /**
   * The whole of an output this run stored by reference (a step result's `ref`, which the prompt shows
   * after a large output's excerpt), read from the blob store: what the `readOutput` tool pages through.
   * A ToolError, an answer for the model, for a ref that is not one of the run's outputs the worker holds
   * (its latest 200 steps or more), or that the store no longer has.
   */
  readOutput(ref: string): Promise<string>;
}

export interface ToolDefinition<I = any> {
  name: string;
  description: string;
  input: z.ZodType<I>;
  /** True if the tool changes anything outside the run: its decision is recorded before it runs. */
  sideEffect: boolean;
  /**
   * The most one try of this tool may take, in ms (default 15 minutes, a Lambda's longest invocation; at
   * most 2,147,483,647). Past it the try fails (ToolTimeoutError, tried again like any failed try, up to
   * 3), `ctx.signal` aborts, and the worker goes on: a tool that hangs never holds its run for good.
   */
  timeoutMs?: number;
  /**
   * A person approves each call before it runs. The engine, not the model, asks: a call of this tool
   * becomes an approval wait (its email and page show the tool and the arguments), and only an approval
   * runs it, at the next step, exactly as it was made; a rejection or a timeout is what the model sees, and
   * the call is not run. Nothing the model says (a tool output may have talked it round) skips or changes
   * the approved call, and a fork does not inherit its parent's approval. The tool may not itself wait.
   */
  approval?: ToolApproval;
  run(input: I, context: ToolContext): unknown;
}

/**
 * The most a tool output may be kept inline. The last result goes whole into the next step's prompt: past
 * a few hundred KB one output fills much of the model's context, and a run failed at its next step with
 * "prompt is too long", for a setting. 256 KB is about 64,000 tokens, under a third of a 200K window.
 */
export const MAX_INLINE_LIMIT = 256 * 1024;

export interface AgentSettings extends ModelSettings {
  stepCap?: number;
  /** Tool outputs above this many bytes are stored by reference (default 4,096; at most MAX_INLINE_LIMIT). */
  inlineLimit?: number;
  /** What each run may spend, unless its start says otherwise: it stops as `over-budget` before going past. */
  budget?: Budget;
}

export interface AgentDefinition {
  /** Recorded on every run this agent starts; a worker of this agent works only runs recorded with it. */
  name: string;
  /**
   * Names this agent had before, whose runs it takes over. Without it, a renamed agent's worker leaves the
   * old runs alone with an error naming both agents, never working them under the wrong tools by mistake.
   */
  formerNames?: string[];
  tools: ToolDefinition[];
  settings?: AgentSettings;
  /** A model that needs no network, used when no API key is configured (demos, tests). */
  offlineModel?: () => Model;
  /** Events that start a run of this agent (functions/events.ts on AWS): an S3 object created, an app event. */
  startOn?: EventTrigger[];
  /** How an incoming event names the waits it resumes; default: detail-type and `detail.key`. */
  eventKey?: (event: IncomingEvent) => { type: string; key: string } | undefined;
}

export type { ToolApproval };

export function tool<I>(definition: ToolDefinition<I>): ToolDefinition<I> {
  return definition;
}

export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
/** The names the Messages API takes for the top-level fields of a tool's input. */
const FIELD_NAME = /^[a-zA-Z0-9_.-]{1,64}$/;

export function defineAgent(definition: AgentDefinition): AgentDefinition {
  if (!definition || typeof definition !== 'object') throw new InvalidInputError(`an agent is defineAgent({ name, tools }), not ${definition === null ? 'null' : typeof definition}`);
  if (!definition.name) throw new InvalidInputError('an agent needs a name');
  checkAgentName(definition.name);
  for (const former of definition.formerNames ?? []) {
    if (typeof former !== 'string' || !former || former === definition.name) {
      throw new InvalidInputError(`agent ${definition.name}: formerNames must be earlier names, not ${JSON.stringify(former)}`);
    }
  }
  checkSettings(definition);
  if (!Array.isArray(definition.tools)) throw new InvalidInputError(`agent ${definition.name}: tools must be an array of tool({...})`);
  const seen = new Set<string>();
  for (const t of definition.tools) {
    if (!TOOL_NAME.test(t?.name)) throw new InvalidInputError(`tool name ${JSON.stringify(t?.name)} must match ${TOOL_NAME}`);
    if (seen.has(t.name)) throw new InvalidInputError(`tool ${t.name} is defined twice`);
    seen.add(t.name);
    if (typeof t.input?.safeParse !== 'function') throw new InvalidInputError(`tool ${t.name}: input must be a zod schema (input: z.object({...}))`);
    if (typeof t.run !== 'function') throw new InvalidInputError(`tool ${t.name}: run must be a function`);
    // Left out in JavaScript, it would read as false: an effect run again on a retry, with no decision kept.
    if (typeof t.sideEffect !== 'boolean') throw new InvalidInputError(`tool ${t.name}: sideEffect must be true (it changes something: its decision is kept and it runs under an idempotency key) or false`);
    if (t.timeoutMs !== undefined && !(Number.isInteger(t.timeoutMs) && t.timeoutMs >= 1 && t.timeoutMs <= MAX_TOOL_TIMEOUT_MS)) {
      throw new InvalidInputError(`tool ${t.name}: timeoutMs must be a whole number of milliseconds from 1 to ${MAX_TOOL_TIMEOUT_MS}, got ${t.timeoutMs}`);
    }
    if (t.approval !== undefined) checkToolApproval(t.name, t.approval);
    // Here, not at every step of every run: an input the model cannot be sent would fail them all.
    toolSpec(t);
  }
  checkEventOptions(definition);
  return definition;
}

const TRIGGER_FIELDS = new Set(['source', 'detailType', 'goal']);

/**
 * The triggers and eventKey, refused when the agent loads: a wrong one was deployed all the same (its rule
 * made from it at synth) and failed, or never matched, every event, one log line each. A trigger written as
 * an EventBridge pattern (`source: ['aws.s3']`, `'detail-type'`) is the likely slip.
 */
function checkEventOptions(definition: AgentDefinition): void {
  const { name, startOn, eventKey } = definition;
  if (eventKey !== undefined && typeof eventKey !== 'function') throw new InvalidInputError(`agent ${name}: eventKey must be a function (event) => ({ type, key }) or undefined`);
  if (startOn === undefined) return;
  if (!Array.isArray(startOn)) throw new InvalidInputError(`agent ${name}: startOn must be an array of triggers ({ source?, detailType?, goal(event) })`);
  startOn.forEach((trigger: unknown, i) => {
    const what = `agent ${name}: startOn trigger ${i}`;
    if (!trigger || typeof trigger !== 'object') throw new InvalidInputError(`${what} must be { source?, detailType?, goal(event) }, not ${JSON.stringify(trigger)}`);
    const fields = trigger as Record<string, unknown>;
    const unknown = Object.keys(fields).find((field) => !TRIGGER_FIELDS.has(field));
    if (unknown !== undefined) {
      throw new InvalidInputError(`${what} has a field ${JSON.stringify(unknown)}${unknown === 'detail-type' ? ' (written detailType here)' : ''}: a trigger has source, detailType and goal`);
    }
    for (const field of ['source', 'detailType'] as const) {
      const value = fields[field];
      if (value !== undefined && !(typeof value === 'string' && value !== '')) {
        throw new InvalidInputError(`${what}: ${field} must be one string, matched exactly, not ${JSON.stringify(value)}${Array.isArray(value) ? ': give a trigger for each' : ''}`);
      }
    }
    if (typeof fields.goal !== 'function') throw new InvalidInputError(`${what}: goal must be a function (event) => the run's goal, or undefined to start none`);
  });
}

/**
 * An agent's name: printable ASCII, no space at either end, at most 128 characters. Every run records it
 * as text, so a number (a JavaScript agent's `name: 5`) started a run that no worker could read. On AWS it
 * is a CloudWatch dimension (ASCII, no control characters, not blank) and is in each Lambda function's
 * description (256 characters): a name past those worked locally and failed the deploy, or the metrics.
 */
const MAX_AGENT_NAME = 128;

function checkAgentName(name: unknown): void {
  if (typeof name !== 'string') throw new InvalidInputError(`an agent's name is text, not a ${typeof name} (${String(name).slice(0, 80)})`);
  const shown = JSON.stringify(name.length > 80 ? `${name.slice(0, 80)}...` : name);
  const odd = /[^\x20-\x7e]/u.exec(name);
  const why = name.length > MAX_AGENT_NAME ? `is ${name.length} characters; the limit is ${MAX_AGENT_NAME}`
    : odd ? `holds ${JSON.stringify(odd[0])} (U+${odd[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}), which is not printable ASCII`
    : name.trim() !== name ? 'has a space at its start or end'
    : undefined;
  if (why) throw new InvalidInputError(`agent name ${shown} ${why}: a name is 1 to ${MAX_AGENT_NAME} printable ASCII characters (letters, digits, punctuation, spaces inside); runs recorded under an earlier name are taken over with formerNames`);
}

/** Settings that would fail every run of the agent are refused when it loads, naming the agent. */
function checkSettings(definition: AgentDefinition): void {
  const { stepCap, inlineLimit, budget, model, maxTokens, temperature } = definition.settings ?? {};
  // What every model call is sent: a wrong one failed each run at its first step, with the API's 400.
  if (model !== undefined && !(typeof model === 'string' && model.trim())) {
    throw new InvalidInputError(`agent ${definition.name}: settings.model must be a model id such as "claude-opus-5-5", got ${JSON.stringify(model)}`);
  }
  if (maxTokens !== undefined && !(Number.isInteger(maxTokens) && maxTokens >= 1)) {
    throw new InvalidInputError(`agent ${definition.name}: settings.maxTokens must be a whole number from 1, got ${JSON.stringify(maxTokens)}`);
  }
  if (temperature !== undefined && !(typeof temperature === 'number' && Number.isFinite(temperature) && temperature >= 0)) {
    throw new InvalidInputError(`agent ${definition.name}: settings.temperature must be a number from 0, got ${JSON.stringify(temperature)}`);
  }
  // Safe: a larger cap (1e308 for "no limit") is written in the run's head, which no load can then read.
  if (stepCap !== undefined && !(Number.isSafeInteger(stepCap) && stepCap >= 1)) {
    throw new InvalidInputError(`agent ${definition.name}: settings.stepCap must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER}, got ${stepCap}`);
  }
  if (inlineLimit !== undefined && !(Number.isInteger(inlineLimit) && inlineLimit >= 0 && inlineLimit <= MAX_INLINE_LIMIT)) {
    throw new InvalidInputError(`agent ${definition.name}: settings.inlineLimit must be a whole number of bytes from 0 to ${MAX_INLINE_LIMIT}, got ${inlineLimit}`);
  }
  // Strict: a misspelt part (`{ dollars: 5 }`) would otherwise leave every run without the limit it meant.
  if (budget !== undefined) {
    const parsed = budgetSchema.strict().safeParse(budget);
    if (!parsed.success || (parsed.data.tokens === undefined && parsed.data.usd === undefined)) {
      throw new InvalidInputError(`agent ${definition.name}: settings.budget must be { tokens?, usd? } with at least one (tokens a whole number above 0, usd a number above 0), got ${JSON.stringify(budget)}`);
    }
  }
}

/** The run agents this agent's workers work: its name, then its former names. */
export function agentNames(agent: AgentDefinition): string[] {
  return [agent.name, ...(agent.formerNames ?? [])];
}

export function worksRunsOf(agent: AgentDefinition, runAgent: string): boolean {
  return runAgent === agent.name || (agent.formerNames?.includes(runAgent) ?? false);
}

const specs = new WeakMap<AgentDefinition, ToolSpec[]>();

/** The tools as the model sees them; computed once per agent, since every step sends them. */
/** The agent's tools a person approves each call of, by name (none for most agents: checked at every step). */
const gated = new WeakMap<AgentDefinition, ReadonlySet<string>>();
function gatedTools(agent: AgentDefinition): ReadonlySet<string> {
  let names = gated.get(agent);
  if (!names) gated.set(agent, (names = new Set(agent.tools.filter((t) => t.approval).map((t) => t.name))));
  return names;
}
/** Whether any of the agent's tools needs approval (ToolDefinition.approval). */
export const gatesAny = (agent: AgentDefinition): boolean => gatedTools(agent).size > 0;
/** Whether this tool of the agent needs approval. */
export const needsApproval = (agent: AgentDefinition, tool: string): boolean => gatedTools(agent).has(tool);

export function toolSpecs(agent: AgentDefinition): ToolSpec[] {
  let cached = specs.get(agent);
  if (!cached) {
    cached = agent.tools.map(toolSpec);
    specs.set(agent, cached);
  }
  return cached;
}

/** A tool as the model sees it; InvalidInputError (permanent) naming the tool if its input cannot be. */
function toolSpec(t: ToolDefinition): ToolSpec {
  let json: Record<string, unknown>;
  try {
    // What the model sends, not what the tool gets: a field with a default is not required of it, and a
    // transform or pipe (z.stringbool(), z.string().pipe(z.coerce.number())) is described by what it
    // takes. The output's schema told the model to send `true` where zod takes "true" and refused it.
    json = z.toJSONSchema(t.input, { io: 'input', override: forTheModel }) as Record<string, unknown>;
  } catch (error) {
    const message = (error as Error).message;
    // z.date() is the natural field for a date, and zod's refusal does not say what to write instead.
    const hint = message.startsWith('Date cannot be represented') ? ' (for a date, take z.iso.datetime() or z.iso.date(), with .transform((text) => new Date(text)) if the tool wants a Date)' : '';
    throw new InvalidInputError(`tool ${t.name}: its input cannot be sent to the model as JSON Schema: ${message}${hint}`);
  }
  const { $schema: _ignored, ...schema } = json;
  // The Messages API takes only an object schema as a tool's input.
  if (schema.type !== 'object') {
    // A union of objects (z.union, z.discriminatedUnion) is the natural way to write "one of these calls",
    // and has no type of its own: said as what it is, with the shape the API takes.
    // An intersection zod could not fold into one object (fields beside a z.record) is an allOf: not a union.
    const union = ['anyOf', 'oneOf'].find((keyword) => keyword in schema);
    const what = union ? `a union (${union} at the top level, which the Messages API refuses); put it in a field: z.object({ action: z.discriminatedUnion(...) })`
      : 'allOf' in schema ? 'an intersection zod could not merge into one object (allOf at the top level, which the Messages API refuses); write it as one z.object, with .catchall(...) for fields it does not name'
      : JSON.stringify(schema.type ?? 'untyped');
    throw new InvalidInputError(`tool ${t.name}: its input must be an object schema (z.object), not ${what}`);
  }
  // The API refuses the whole request for a top-level field name past its pattern (a space, brackets, a
  // letter outside ASCII, over 64 characters): every step of every run would fail with a 400 naming only
  // the tool's position. Nested names it takes as they are.
  const properties = schema.properties && typeof schema.properties === 'object' ? Object.keys(schema.properties) : [];
  const refused = properties.filter((name) => !FIELD_NAME.test(name));
  if (refused.length) {
    throw new InvalidInputError(`tool ${t.name}: the Messages API refuses the field name${refused.length === 1 ? '' : 's'} ${refused.map((name) => JSON.stringify(name)).join(', ')} of its input: a top-level field's name must match ${FIELD_NAME} (rename it, and map it back in run)`);
  }
  // Told, so that the model reads an approval as its call's answer and the run at the next step as its result.
  const description = t.approval ? `${t.description} (A person approves each call of this tool before it runs: the step shows their answer, and an approved call runs at the next step, as you made it.)` : t.description;
  return { name: t.name, description, inputSchema: schema };
}

/** Types zod describes as JSON Schema that no JSON a model sends can be: the tool could never be called. */
const NOT_IN_JSON: Record<string, { what: string; instead: string }> = {
  file: { what: 'a file (z.file()', instead: 'take its path, URL or text as a string' },
  promise: { what: 'a promise (z.promise()', instead: 'take the value it would resolve to' },
};

/**
 * The JSON Schema of one zod type, adjusted for the model. An object that drops the fields it does not
 * know (z.object) says so, as its output's schema did: the model is told to send no others, where the
 * input's schema would let a misspelt field go unread. A file or a promise is refused (zod writes a file
 * as a binary string, which parses as no file): the tool could never be called.
 */
function forTheModel({ zodSchema, jsonSchema, path }: { zodSchema: z.core.$ZodType; jsonSchema: Record<string, unknown>; path: (string | number)[] }): void {
  const def = zodSchema._zod.def as { type: string; catchall?: unknown };
  const refused = NOT_IN_JSON[def.type];
  if (refused) {
    const at = path.filter((part) => part !== 'properties').join('.');
    throw new Error(`${refused.what}${at ? ` at ${at}` : ''}) cannot be sent in JSON: ${refused.instead}`);
  }
  if (def.type === 'object' && def.catchall === undefined) jsonSchema.additionalProperties = false;
}

const isAgentLike = (value: unknown): boolean => Boolean(value && typeof value === 'object' && Array.isArray((value as AgentDefinition).tools));

/**
 * The agent in what a program imported: an ES module's default import of a CommonJS module (a .ts agent in
 * a package `npm init` made, imported by a .mts program) is the module's exports, `{ default: agent }`.
 */
export function importedAgent(value: unknown): unknown {
  return !isAgentLike(value) && isAgentLike((value as { default?: unknown } | undefined)?.default) ? (value as { default: unknown }).default : value;
}

/** Loads an agent module (TypeScript or JavaScript): its default export, or an export named `agent`. */
export async function loadAgent(path: string): Promise<AgentDefinition> {
  const file = resolve(path);
  if (!existsSync(file)) throw new InvalidInputError(`no agent module at ${path} (${file} does not exist)`);
  let mod: { default?: unknown; agent?: unknown };
  try {
    mod = (await import(pathToFileURL(file).href)) as typeof mod;
  } catch (error) {
    // The module is the user's input: its syntax error, a missing import or a throw at load is theirs to
    // fix, so it is a bad-input error, not a crash of stepwise (the original stays as cause).
    throw new InvalidInputError(`cannot load agent ${path}: ${(error as Error)?.message ?? String(error)}`, { cause: error });
  }
  // A module compiled to CommonJS (a .ts agent in a CommonJS package) arrives as { default: exports }.
  const compiled = mod.default as { default?: unknown; agent?: unknown } | undefined;
  const candidate = (mod.agent ?? (isAgentLike(mod.default) ? mod.default : compiled?.agent ?? compiled?.default)) as AgentDefinition | undefined;
  if (!candidate || typeof candidate !== 'object' || !Array.isArray(candidate.tools) || !candidate.name) {
    throw new InvalidInputError(`${path} does not export an agent (export default defineAgent({...}))`);
  }
  return defineAgent(candidate);
}
