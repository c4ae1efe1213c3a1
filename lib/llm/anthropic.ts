import type Anthropic from '@anthropic-ai/sdk';
import type { Middleware } from '@anthropic-ai/sdk';
// The base client and the one resource used, not the full client: it carries every API resource (beta,
// organization, files ...), about 320 KB of the worker's bundle that no step calls.
import { BaseAnthropic } from '@anthropic-ai/sdk/client';
import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError, AnthropicError } from '@anthropic-ai/sdk/core/error';
import { InvalidInputError, ModelKeyError, ModelUnavailableError, PermanentError, StepwiseError, TransientError, errorMessage } from '../core/errors.ts';
import { foldedExcerpt, type PromptBlock } from '../core/prompt.ts';
import type { Usage } from '../core/state.ts';
import type { Model, ModelReply, ModelRequest, ToolSpec } from '../ports.ts';
import { joinedSignal } from '../joined-signal.ts';
import { DEFAULT_DEADLINE_MS } from '../settings.ts';
import { MASK, redactSecrets, redactUrl } from '../core/redact.ts';
import { apiKeyFromEnv, keyProblem, rememberKey, type ApiKeySource } from './api-key.ts';

/**
 * The Anthropic Messages API behind the engine's Model port. One call per step: the Step prompt as the
 * user message, the agent's tools as Anthropic tools, the reply read as one tool call or DONE.
 */

import { DEFAULT_MODEL, MODEL_ENV } from './model-id.ts';

export { DEFAULT_MODEL, MODEL_ENV };
/** Room for adaptive thinking (always on for Opus 5.5) plus one tool call; under the SDK's 21,333 non-streaming cap. */
export const DEFAULT_MAX_TOKENS = 8192;
export const DEFAULT_MAX_RETRIES = 2;
/** One HTTP attempt. A step's reply is short, but thinking models can take minutes before the first byte. */
export const DEFAULT_ATTEMPT_TIMEOUT_MS = 180_000;
/** DEFAULT_DEADLINE_MS: the whole call, retries and their waits included; the caller's signal can cut it shorter. */
export { DEFAULT_DEADLINE_MS };
/** The API accepts at most this many cache_control breakpoints per request. */
export const MAX_CACHE_BREAKPOINTS = 4;

export interface AnthropicModelOptions {
  /** A key, or where to read it; default: ANTHROPIC_API_KEY, else the secret named by ANTHROPIC_API_KEY_SECRET_ID. */
  apiKey?: string | ApiKeySource;
  /** Default: ANTHROPIC_BASE_URL, else the SDK's default (api.anthropic.com). */
  baseURL?: string;
  /** The model for agents whose settings name none. Default: STEPWISE_MODEL, else DEFAULT_MODEL. */
  model?: string;
  maxRetries?: number;
  attemptTimeoutMs?: number;
  deadlineMs?: number;
  env?: NodeJS.ProcessEnv;
}

/**
 * What a step needs of the SDK client: one non-streaming POST /v1/messages, with the client's auth,
 * retries, timeouts and typed errors. Posted through the base client rather than its Messages resource,
 * whose class brings the streaming helpers, the batches resource and a partial-JSON parser into the Lambda
 * bundle (about 20 KB minified) for a call that never streams.
 */
type MessagesClient = Pick<BaseAnthropic, 'post'>;

export class AnthropicModel implements Model {
  readonly name: string;
  readonly defaultModel: string;
  private readonly keySource: ApiKeySource | undefined;
  private readonly baseURL: string | undefined;
  private readonly maxRetries: number;
  private readonly attemptTimeoutMs: number;
  private readonly deadlineMs: number;
  /** The client for the key last read; made again when the key changes. */
  private client: { key: string; anthropic: MessagesClient } | undefined;

  constructor(options: AnthropicModelOptions = {}) {
    const env = options.env ?? process.env;
    this.defaultModel = options.model ?? (env[MODEL_ENV]?.trim() || DEFAULT_MODEL);
    this.name = `anthropic:${this.defaultModel}`;
    const key = options.apiKey;
    // A plain function of the caller's is remembered too (read once per refresh interval, not per step);
    // a source that remembers already has invalidate().
    this.keySource = typeof key === 'string' ? async () => key : key ? (key.invalidate ? key : rememberKey(key)) : apiKeyFromEnv(env)?.source;
    this.baseURL = checkedBaseUrl(options.baseURL ?? (env.ANTHROPIC_BASE_URL?.trim() || undefined));
    this.maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? DEFAULT_ATTEMPT_TIMEOUT_MS;
    this.deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  }

  async decide(request: ModelRequest): Promise<ModelReply> {
    const params = messageRequest(request, this.defaultModel);
    const first = await this.connect();
    try {
      return await this.send(first, params, request);
    } catch (error) {
      if (!(error instanceof ModelKeyError)) throw error;
      // The key was refused: read it again. A rotated key is used at once; the same key pauses the work.
      this.keySource?.invalidate?.();
      const again = await this.connect();
      if (again.key === first.key) throw error;
      return await this.send(again, params, request);
    }
  }

  private async send({ key, anthropic: client }: { key: string; anthropic: MessagesClient }, params: Anthropic.MessageCreateParamsNonStreaming, request: ModelRequest): Promise<ModelReply> {
    // On the process's own clock: a step of the system clock (NTP, a VM restored) must not move the deadline.
    const deadline = performance.now() + this.deadlineMs;
    const deadlineHit = new AbortController();
    const timer = setTimeout(() => deadlineHit.abort(), this.deadlineMs);
    // Joined for this call and let go after it: a caller's signal that lives as long as its program (an
    // embedding's shutdown) kept one more signal for every call under AbortSignal.any on Node 20.
    const joined = request.signal ? joinedSignal(request.signal, deadlineHit.signal) : undefined;
    const signal = joined?.signal ?? deadlineHit.signal;
    try {
      let message: Anthropic.Message;
      try {
        message = await client.post<Anthropic.Message>('/v1/messages', {
          body: params,
          signal,
          // The SDK applies this to each attempt; the deadline signal bounds the attempts and waits together.
          timeout: Math.max(1, Math.floor(Math.min(this.attemptTimeoutMs, this.deadlineMs))),
          maxRetries: this.maxRetries,
          middleware: [stopRetryingPastDeadline(deadline)],
        });
      } catch (error) {
        // The SDK parses a successful answer's JSON body, and only that: a body cut short, empty, or a page
        // sent as JSON was the bare "the model call failed: Unterminated string in JSON at position 49",
        // naming neither the API nor what it sent.
        if (!(error instanceof SyntaxError)) throw error;
        throw new TransientError(`the Messages API at ${this.where()} answered 200 with a body that is not JSON (cut short, empty, or not the API's): ${foldedExcerpt(error.message, 160)}`, { cause: error });
      }
      // A gateway that labels the API's JSON `text/plain` (or anything but JSON) gets its body back from the
      // SDK as text: a message all the same when that text is one, where the try failed as "a string".
      if (typeof message === 'string') message = jsonMessage(message) ?? message;
      const problem = messageProblem(message);
      // A gateway or proxy at ANTHROPIC_BASE_URL may answer 200 with a page or other JSON: said as such,
      // not as the TypeError that reading it as a message would throw.
      if (problem) {
        throw new TransientError(`the Messages API at ${this.where()} answered 200 with something that is not a message (${problem}): ${foldedExcerpt(typeof message === 'string' ? message : JSON.stringify(message) ?? String(message), 120)}`);
      }
      return readReply(message, params.max_tokens);
    } catch (error) {
      throw withModelName(withToolNames(withoutKey(classifyError(error, {
        callerAborted: request.signal?.aborted ?? false,
        deadlineHit: deadlineHit.signal.aborted,
        deadlineMs: this.deadlineMs,
      }), key), params.tools), params.model, request.runId);
    } finally {
      clearTimeout(timer);
      joined?.release();
    }
  }

  /** The API's address as an error may name it. */
  private where(): string {
    return redactUrl(this.baseURL ?? 'https://api.anthropic.com');
  }

  /** The client for the current key. The source remembers the key, so this reads it once per refresh, not per step. */
  private async connect(): Promise<{ key: string; anthropic: MessagesClient }> {
    const source = this.keySource;
    if (!source) throw new PermanentError('no Anthropic API key: set ANTHROPIC_API_KEY, or ANTHROPIC_API_KEY_SECRET_ID on AWS');
    let key: string;
    try {
      key = await source();
    } catch (error) {
      throw error instanceof StepwiseError ? error : new TransientError(`cannot get the Anthropic API key: ${errorMessage(error)}`, { cause: error });
    }
    const problem = keyProblem(key);
    if (problem) {
      // A key the API would refuse: the work pauses as for a 401, and the next step reads it again, so a
      // fixed secret is used at once.
      source.invalidate?.();
      throw new ModelKeyError(`the Anthropic API key cannot be sent: ${problem}`);
    }
    if (this.client?.key !== key) {
      const base = new BaseAnthropic({ apiKey: key, maxRetries: this.maxRetries, ...(this.baseURL ? { baseURL: this.baseURL } : {}) });
      this.client = { key, anthropic: base };
    }
    return this.client;
  }
}

// ---- request ----

export function messageRequest(request: ModelRequest, defaultModel: string): Anthropic.MessageCreateParamsNonStreaming {
  const { settings } = request;
  return {
    model: settings.model ?? defaultModel,
    max_tokens: settings.maxTokens ?? DEFAULT_MAX_TOKENS,
    // Only when asked for: newer models refuse a non-default temperature with a 400.
    ...(settings.temperature !== undefined ? { temperature: settings.temperature } : {}),
    messages: [{ role: 'user', content: userContent(request.prompt) }],
    // One tool call per reply is the protocol: ask for it, so a reply with several is a model bug, not
    // the normal case. 'auto' is also the only choice that extended thinking allows besides 'none'.
    ...(request.tools.length
      ? { tools: request.tools.map(anthropicTool), tool_choice: { type: 'auto' as const, disable_parallel_tool_use: true } }
      : {}),
  };
}

export function anthropicTool(spec: ToolSpec): Anthropic.Tool {
  return { name: spec.name, description: spec.description, input_schema: spec.inputSchema as Anthropic.Tool.InputSchema };
}

/**
 * The prompt blocks as text blocks, joined exactly as the Step prompt (any lone surrogate made U+FFFD),
 * with cache_control on the flagged ones (the last MAX_CACHE_BREAKPOINTS of them). Block boundaries are
 * kept as rendered: the API matches a cached prefix block by block, and renderStepPrompt keeps step n's
 * blocks identical in step n + 1. A blank block is folded into its neighbour, since the API refuses
 * whitespace-only text.
 */
export function userContent(prompt: PromptBlock[]): Anthropic.TextBlockParam[] {
  const blocks: { text: string; cache: boolean }[] = [];
  let carry = '';
  for (const block of prompt) {
    const last = blocks[blocks.length - 1];
    if (block.text.trim() === '') {
      if (last) {
        last.text += block.text;
        last.cache ||= Boolean(block.cache);
      } else {
        carry += block.text;
      }
      continue;
    }
    blocks.push({ text: carry + block.text, cache: Boolean(block.cache) });
    carry = '';
  }
  if (carry) blocks.push({ text: carry, cache: false });
  const flagged = blocks.flatMap((b, i) => (b.cache ? [i] : []));
  const kept = new Set(flagged.slice(-MAX_CACHE_BREAKPOINTS));
  return blocks.map((b, i) => ({
    type: 'text',
    // Half an emoji (a lone surrogate: a tool's string output, a goal, an event's payload) is not Unicode,
    // and the API refuses the whole request with it (400, "no low surrogate in string"), at every retry:
    // it becomes U+FFFD, as it does in the UTF-8 the stores write. Well-formed text is returned as it is.
    text: b.text.toWellFormed(),
    ...(kept.has(i) ? { cache_control: { type: 'ephemeral' as const } } : {}),
  }));
}

/**
 * Lets the SDK retry only while a retry can still finish in time. The SDK sleeps as long as retry-after
 * says (120 s is honoured in full); when that wait ends past the deadline, the attempt is marked not
 * retryable so the call fails now, as a transient error, instead of sleeping until the deadline.
 */
function stopRetryingPastDeadline(deadline: number): Middleware {
  // `deadline` is on performance.now(): by Date.now() a system clock stepped forward ended the retries at
  // once, and one stepped back slept a retry-after until the deadline's abort instead of failing now.
  return async (request, next) => {
    const response = await next(request);
    if (response.ok) return response;
    const waitMs = retryAfterMs(response.headers);
    if (waitMs === undefined || performance.now() + waitMs < deadline) return response;
    const headers = new Headers(response.headers);
    headers.set('x-should-retry', 'false');
    headers.set(PAST_DEADLINE_HEADER, String(Math.round(waitMs)));
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  };
}

/** Set on a response whose retry-after reached past the deadline, so the error can say why it gave up. */
const PAST_DEADLINE_HEADER = 'x-stepwise-retry-after-past-deadline';

export function retryAfterMs(headers: Headers): number | undefined {
  const ms = Number.parseFloat(headers.get('retry-after-ms') ?? '');
  if (Number.isFinite(ms) && ms > 0) return ms;
  const value = headers.get('retry-after');
  if (!value) return undefined;
  const seconds = Number.parseFloat(value);
  if (Number.isFinite(seconds)) return seconds > 0 ? seconds * 1000 : undefined;
  const at = Date.parse(value);
  return Number.isFinite(at) && at > Date.now() ? at - Date.now() : undefined;
}

/**
 * The API's address, refused at once when no request could be sent to it: fetch refuses a URL with
 * `user:password@`, and a host with no scheme is no URL. Either failed every step as the model being
 * unreachable, waited out for half an hour (30 tries) before the run failed, for a setting to fix.
 */
function checkedBaseUrl(baseURL: string | undefined): string | undefined {
  if (baseURL === undefined) return undefined;
  let url: URL | undefined;
  try { url = new URL(baseURL); } catch { url = undefined; }
  if (!url || !/^https?:$/.test(url.protocol) || !url.host) {
    throw new InvalidInputError(`ANTHROPIC_BASE_URL (or baseURL) must be an http:// or https:// URL, got ${JSON.stringify(redactUrl(baseURL))}`);
  }
  if (url.username || url.password) {
    throw new InvalidInputError(`ANTHROPIC_BASE_URL (or baseURL) ${redactUrl(baseURL)} carries a user and password, which fetch refuses to send: give the gateway's address alone`);
  }
  return baseURL;
}

// ---- reply ----

/**
 * DONE at the start of the reply, as the Step prompt asks; Markdown around it (`**DONE**`, `# DONE`,
 * `` `DONE` ``) is how a chat model often writes a word it was told to stand alone, and still means DONE.
 */
const DONE = /^[*_#>`~\s]*DONE(?![A-Za-z0-9_])[*_`~]*/;

/** One tool call, DONE with its summary, or why the reply is neither. Thinking blocks are ignored. */
export function readReply(message: Anthropic.Message, maxTokens: number): ModelReply {
  const usage = usageOf(message.usage);
  // A gateway may answer `model: null`: the engine refuses a reply whose model is not a string, and the
  // call's usage went uncounted with it. Without one, the step is priced by the model the worker asked.
  const model = typeof message.model === 'string' && message.model ? message.model : undefined;
  const calls = message.content.filter((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
  const text = message.content.filter((b): b is Anthropic.TextBlock => b.type === 'text').map((b) => b.text).join('');
  const invalid = (reason: string): ModelReply => ({ kind: 'invalid', reason, usage, ...(model ? { model } : {}) });

  switch (message.stop_reason) {
    case 'max_tokens':
      // Named by its setting: three such replies fail the run, and the operator's fix is to raise it.
      return invalid(`the reply was cut off at max_tokens (${maxTokens}, the agent's settings.maxTokens) before it finished`);
    case 'model_context_window_exceeded':
      return invalid('the reply was cut off: the context window is full');
    case 'refusal':
      return invalid(`the model refused to continue (stop_reason "refusal"${refusalDetails(message.stop_details)})`);
    case 'pause_turn':
      return invalid('the model paused its turn instead of answering');
    default:
      break;
  }
  if (calls.length > 1) return invalid(`${calls.length} tool calls in one reply (${calls.map((c) => c.name).join(', ')}); exactly one is allowed`);
  const [call] = calls;
  if (call) {
    // Not the API's, a gateway's: the engine cannot record a call without a tool name, and refused the
    // whole reply as the adapter's bug, its usage uncounted. An unusable reply is counted and explained.
    if (typeof call.name !== 'string' || !call.name) return invalid('a tool call without a tool name');
    return { kind: 'tool', tool: call.name, input: call.input, usage, ...(model ? { model } : {}) };
  }
  const trimmed = text.trim();
  if (DONE.test(trimmed)) {
    return { kind: 'done', summary: trimmed.replace(DONE, '').replace(/^[\s\p{P}]+/u, '').trim(), usage, ...(model ? { model } : {}) };
  }
  if (trimmed) return invalid(`no tool call and no DONE; the reply said: ${foldedExcerpt(trimmed, 200)}`);
  // Blocks the adapter does not read (a server tool's, thinking alone) made "an empty reply" of a reply
  // that was not empty: their types say what the model did instead.
  const others = [...new Set(message.content.map((b) => String((b as { type?: unknown }).type)))];
  return invalid(others.length ? `no text and no tool call, only ${others.join(', ')} blocks: no tool call and no DONE` : 'an empty reply: no tool call and no DONE');
}

/** Characters kept of a refusal's explanation: it is the run's reason and the model's retry note. */
const REFUSAL_EXPLANATION_EXCERPT = 300;

/**
 * What the API said of a refusal (stop_details): its policy category and explanation. Without them a run
 * failed by three refusals gave its operator no clue which part of the goal or of a tool's output to change.
 */
function refusalDetails(details: Anthropic.RefusalStopDetails | null | undefined): string {
  if (!details || typeof details !== 'object') return '';
  const category = typeof details.category === 'string' && details.category ? `, category "${details.category}"` : '';
  const explanation = typeof details.explanation === 'string' && details.explanation.trim()
    ? `: ${foldedExcerpt(details.explanation, REFUSAL_EXPLANATION_EXCERPT)}`
    : '';
  return category + explanation;
}

/** Why a 200's body is not a Messages API message readReply can read, or undefined. */
export function messageProblem(message: unknown): string | undefined {
  if (!message || typeof message !== 'object' || Array.isArray(message)) return `a ${message === null ? 'null' : Array.isArray(message) ? 'list' : typeof message}, not an object`;
  const m = message as Record<string, unknown>;
  if (!Array.isArray(m.content)) return 'no content list';
  if (m.content.some((b) => !b || typeof b !== 'object' || typeof (b as { type?: unknown }).type !== 'string')) return 'a content block without a type';
  if (!m.usage || typeof m.usage !== 'object') return 'no usage';
  return undefined;
}

/** In key order, as the step record holding it is (stepRecordOf): its canonical JSON then copies nothing. */
export function usageOf(usage: Anthropic.Usage): Usage {
  return {
    cacheReadTokens: tokenCount(usage.cache_read_input_tokens),
    cacheWriteTokens: tokenCount(usage.cache_creation_input_tokens),
    inputTokens: tokenCount(usage.input_tokens),
    outputTokens: tokenCount(usage.output_tokens),
  };
}

/**
 * A usage field as the whole number the engine records. The API sends whole numbers, or null for a cache
 * field; a gateway may send `"120"` or `12.0000001`, which the engine refused (a usage field must be a
 * whole number), failing a reply that was fine and leaving its tokens uncounted.
 */
function tokenCount(value: unknown): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : Number.NaN;
  return Number.isFinite(n) && n > 0 ? Math.round(n) : 0;
}

// ---- errors ----

/** Statuses worth another try later: timeouts, conflicts, rate limits, client-closed, server errors. */
function isTransientStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status === 499 || status >= 500;
}

/**
 * The 429 codes of a spend limit the organization has reached (its tier's monthly threshold, its
 * contract's): no retry within the step's half hour of outage tries gets through, only the operator can.
 */
const SPEND_LIMIT_CODES = new Set(['enforced_spend_limit_reached', 'contract_spend_limit_reached']);

/**
 * What is left after the SDK's own retries, sorted for the engine: ModelUnavailableError (unreachable,
 * timed out, 429, 5xx, 529) counts toward the step's 30 failures of a model outage, other TransientErrors
 * (a call past its deadline) toward its 3; PermanentError (bad request, not found, too large) fails the run at once;
 * ModelKeyError (401, 403: a missing, rotated or revoked key; 402 or a spend limit's 429: the key's
 * organization cannot pay) pauses the work until the key or its account is fixed.
 */
export function classifyError(error: unknown, context: { callerAborted: boolean; deadlineHit: boolean; deadlineMs: number }): StepwiseError {
  if (error instanceof StepwiseError) return error;
  if (error instanceof APIUserAbortError) {
    return new TransientError(context.callerAborted && !context.deadlineHit
      ? 'the model call was cancelled by the worker (its time is up)'
      : `the model call did not finish within its ${Math.round(context.deadlineMs / 1000)} s deadline, retries included`, { cause: error });
  }
  if (error instanceof APIConnectionTimeoutError) {
    return new ModelUnavailableError('the Anthropic API did not answer in time, after retries', { cause: error });
  }
  if (error instanceof APIConnectionError) {
    const cause = error.cause ? `: ${errorMessage(error.cause)}` : '';
    return new ModelUnavailableError(`cannot reach the Anthropic API, after retries${cause}`, { cause: error });
  }
  if (error instanceof APIError && typeof error.status === 'number') {
    const reason = describeApiError(error);
    if (error.status === 401 || error.status === 403) return new ModelKeyError(`the Anthropic API refused the key: ${reason}`, { cause: error });
    // Out of credit or over a spend limit: every run's next step would fail the same way, and a run failed
    // for it would have to be retried by hand once the bill is paid. Paused, the work resumes by itself.
    if (error.status === 402 || error.type === 'billing_error' || SPEND_LIMIT_CODES.has(error.errorCode ?? '')) {
      return new ModelKeyError(`the Anthropic API will not bill the key's organization: ${reason}`, { cause: error });
    }
    if (!isTransientStatus(error.status)) return new PermanentError(`the Anthropic API refused the request: ${reason}`, { cause: error });
    const pastDeadline = error.headers?.get(PAST_DEADLINE_HEADER);
    const why = pastDeadline ? `; it asked to retry after ${Math.round(Number(pastDeadline) / 1000)} s, past this call's deadline` : ', after retries';
    // The API's own retry-after: the step's next try waits for it (TransientError.retryAfterMs).
    return new ModelUnavailableError(`the Anthropic API failed: ${reason}${why}`, { cause: error, retryAfterMs: error.headers ? retryAfterMs(error.headers) : undefined });
  }
  if (error instanceof AnthropicError) {
    // Raised by the SDK before any request is sent (no credentials, invalid options): a configuration error.
    return new PermanentError(`the Anthropic client cannot send the request: ${error.message}`, { cause: error });
  }
  return new TransientError(`the model call failed: ${errorMessage(error)}`, { cause: error });
}

/** The text's JSON when it is a JSON object (a message sent under another content type), else undefined. */
function jsonMessage(text: string): Anthropic.Message | undefined {
  if (!text.trimStart().startsWith('{')) return undefined;
  try {
    return JSON.parse(text) as Anthropic.Message;
  } catch {
    return undefined;
  }
}

/**
 * The error with the key and URL credentials masked in its message. A gateway or proxy at ANTHROPIC_BASE_URL
 * may echo the key it refused (`invalid x-api-key sk-ant-...`) or the request's headers in its error page,
 * and fetch names a base URL's `user:password@`; the message becomes the run's reason or last error, kept
 * in its checkpoints, shown by status, the API and the inspector, and logged at every try.
 */
export function withoutKey(error: StepwiseError, key: string): StepwiseError {
  const original = error.message;
  const masked = redactSecrets(key ? original.replaceAll(key, MASK) : original);
  if (masked === original) return error;
  error.message = masked;
  // The stack starts with the message it was made with.
  if (error.stack) error.stack = error.stack.replace(original, masked);
  return error;
}

/**
 * A refusal that points at a tool by its place in the request (`tools.3.custom.input_schema...`) says which
 * tool that is: the agent's author knows tools by name, not by their order in the request.
 */
export function withToolNames(error: StepwiseError, tools: readonly object[] | undefined): StepwiseError {
  if (!(error instanceof PermanentError) || !tools?.length) return error;
  const named = error.message.replace(/\btools\.(\d+)\b/g, (path, index: string) => {
    const name = (tools[Number(index)] as { name?: unknown } | undefined)?.name;
    return typeof name === 'string' ? `${path} (tool ${name})` : path;
  });
  if (named === error.message) return error;
  if (error.stack) error.stack = error.stack.replace(error.message, named);
  error.message = named;
  return error;
}

/**
 * A 404 says which model id was sent and where it comes from: a retired or misspelt id fails every run at
 * once, and the API's own message (`model: claude-3-opus-20240229`) does not say which setting to change.
 */
export function withModelName(error: StepwiseError, model: string, runId: string): StepwiseError {
  if (!(error instanceof PermanentError) || !(error.cause instanceof APIError) || error.cause.status !== 404) return error;
  const named = `${error.message}; the request named model "${model}" (the agent's settings.model, else STEPWISE_MODEL, else ${DEFAULT_MODEL}): a retired or misspelt id? set a current one, then \`stepwise retry ${runId}\``;
  if (error.stack) error.stack = error.stack.replace(error.message, named);
  error.message = named;
  return error;
}

/** Characters kept of an error body that is not the API's own (a proxy's or a gateway's page). */
const FOREIGN_ERROR_EXCERPT = 200;

function describeApiError(error: APIError): string {
  const type = error.type ? ` ${error.type}` : '';
  // Not the API's error JSON (a load balancer's HTML 413 or 502 page, a gateway's JSON): the SDK's message
  // is the status and the whole body, which became the run's reason and every progress line, many lines
  // of markup long. Its start on one line, the status said once.
  const message = error.apiMessage ?? foldedExcerpt(error.message.replace(new RegExp(`^${error.status} `), ''), FOREIGN_ERROR_EXCERPT);
  const id = error.requestID ? ` (request ${error.requestID})` : '';
  return `${error.status}${type}: ${message}${id}`;
}
