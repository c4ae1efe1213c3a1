import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local stand-in for the Anthropic Messages API (POST /v1/messages) on plain node:http, for tests that
 * go through the real SDK: its retries, timeouts, auth headers and error classes all run for real.
 *
 * It plays scripted replies in order (then a fallback), records every request, validates requests the way
 * the API does where our adapter could get it wrong (auth, cache_control breakpoints, empty text), and
 * reports usage like the API, prompt caching included: tokens are estimated as bytes / 4, and the cache
 * remembers the prefix up to each cache_control breakpoint (tools first, then system, then message
 * blocks). A later request reads the longest remembered prefix that ends at one of its block boundaries
 * within the lookback window before one of its breakpoints, as the real API does.
 */

export type StopReason = 'end_turn' | 'tool_use' | 'max_tokens' | 'refusal' | 'stop_sequence' | 'pause_turn';

export type ReplyBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; name: string; input: unknown }
  | { type: 'thinking'; thinking: string };

export type Reply =
  /** `stopDetails`: the API's structured why of a stop (a refusal's policy category and explanation). */
  | { type: 'message'; content: ReplyBlock[]; stopReason: StopReason; stopDetails?: Record<string, unknown> }
  /** `errorCode`: the body's error.details.error_code, the API's stable name of the cause. */
  | { type: 'error'; status: number; message: string; errorType?: string; errorCode?: string; headers?: Record<string, string> }
  /**
   * Closes the socket without answering: the client sees a connection reset. With `midReply`, first sends
   * that reply's status, headers (its full content-length) and half its body: the reply is cut short.
   */
  | { type: 'drop'; midReply?: Extract<Reply, { type: 'message' }> }
  /** Waits, then answers; a client that gives up first just closes the connection. */
  | { type: 'delay'; ms: number; then: Reply }
  /** Any status and body, e.g. a 200 that is not JSON. */
  | { type: 'raw'; status: number; body: string; headers?: Record<string, string> };

/** A reply, or a function of the request computing one (to answer according to the prompt). */
export type ReplySource = Reply | ((request: RecordedRequest) => Reply);

export interface RecordedRequest {
  method: string;
  path: string;
  /** Lower-case header names. */
  headers: Record<string, string>;
  /** The parsed JSON body (undefined if it was not JSON). */
  body: MessagesBody | undefined;
  /** The user message's text blocks joined: for our adapter, exactly the Step prompt. */
  userText: string;
  /** The SDK's x-stainless-retry-count: 0 on a first attempt. */
  retryCount: number;
  /** What the server did: an HTTP status, or 'dropped'. Set when the answer is sent. */
  outcome?: number | 'dropped';
  /** The usage reported, for 200 replies. */
  usage?: ReportedUsage;
}

export interface MessagesBody {
  model?: unknown;
  max_tokens?: unknown;
  temperature?: unknown;
  messages?: { role?: unknown; content?: unknown }[];
  tools?: Record<string, unknown>[];
  system?: unknown;
  [key: string]: unknown;
}

export interface ReportedUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
  service_tier: 'standard';
}

export interface MessagesServerOptions {
  /** If set, requests must carry this key (x-api-key or Authorization: Bearer). Otherwise any key passes. */
  apiKey?: string;
  /**
   * Prefixes shorter than this are not cached, as on the real API: 512 tokens for the Claude 5 family,
   * 1,024 to 4,096 for older models. Default 512; tests of small prompts set 0.
   */
  minCacheableTokens?: number;
  /** How many block boundaries before a breakpoint a cache lookup checks (the API documents 20). */
  lookbackBlocks?: number;
  /** The 5-minute ephemeral cache lifetime, refreshed on each hit. */
  cacheTtlMs?: number;
  now?: () => number;
}

export interface MessagesServer {
  /** Base URL for the SDK (baseURL / ANTHROPIC_BASE_URL). */
  url: string;
  requests: RecordedRequest[];
  /** Queues replies, one per request, in order. */
  script(...replies: ReplySource[]): void;
  /** What to answer once the script is used up (default: a 400 saying so). */
  otherwise(reply: ReplySource): void;
  /** Forgets every cached prefix, as if the cache had expired. */
  clearCache(): void;
  /** Between tests: drops unplayed replies, recorded requests, the fallback and the cache. */
  reset(): void;
  stop(): Promise<void>;
}

export const MAX_CACHE_BREAKPOINTS = 4;
const NO_REPLY_LEFT: Reply = { type: 'error', status: 400, message: 'messages server: no scripted reply left for this request' };

export async function startMessagesServer(options: MessagesServerOptions = {}): Promise<MessagesServer> {
  const queue: ReplySource[] = [];
  let fallback: ReplySource = NO_REPLY_LEFT;
  const requests: RecordedRequest[] = [];
  const cache = new PromptCache({
    minTokens: options.minCacheableTokens ?? 512,
    lookback: options.lookbackBlocks ?? 20,
    ttlMs: options.cacheTtlMs ?? 5 * 60_000,
    now: options.now ?? Date.now,
  });
  const timers = new Set<NodeJS.Timeout>();

  const server = createServer((req, res) => {
    readBody(req).then((raw) => {
      const recorded = record(req, raw);
      requests.push(recorded);
      const refusal = checkRequest(req, recorded, options.apiKey);
      const source = refusal ?? queue.shift() ?? fallback;
      const reply = typeof source === 'function' ? source(recorded) : source;
      answer(reply, recorded, req, res);
    }).catch((error: unknown) => {
      if (!res.headersSent) sendJson(res, 500, errorBody('api_error', `messages server: ${String(error)}`));
    });
  });

  function answer(reply: Reply, recorded: RecordedRequest, req: IncomingMessage, res: ServerResponse): void {
    switch (reply.type) {
      case 'drop': {
        recorded.outcome = 'dropped';
        if (!reply.midReply) { req.socket.destroy(); return; }
        const text = JSON.stringify(messageBody(reply.midReply, recorded, cache.usageFor(recorded.body!, reply.midReply.content)));
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        // Flushed before the socket goes: the client has its headers and is reading the body when it ends.
        res.write(text.slice(0, Math.floor(text.length / 2)), () => req.socket.destroy());
        return;
      }
      case 'delay': {
        const timer = setTimeout(() => {
          timers.delete(timer);
          if (!res.destroyed) answer(reply.then, recorded, req, res);
        }, reply.ms);
        timers.add(timer);
        res.on('close', () => { clearTimeout(timer); timers.delete(timer); });
        return;
      }
      case 'raw':
        recorded.outcome = reply.status;
        res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
        res.end(reply.body);
        return;
      case 'error':
        recorded.outcome = reply.status;
        sendJson(res, reply.status, errorBody(reply.errorType ?? errorTypeFor(reply.status), reply.message, reply.errorCode), reply.headers);
        return;
      case 'message': {
        const usage = cache.usageFor(recorded.body!, reply.content);
        recorded.outcome = 200;
        recorded.usage = usage;
        sendJson(res, 200, messageBody(reply, recorded, usage));
        return;
      }
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    script: (...replies) => { queue.push(...replies); },
    otherwise: (reply) => { fallback = reply; },
    clearCache: () => cache.clear(),
    reset: () => {
      queue.length = 0;
      requests.length = 0;
      fallback = NO_REPLY_LEFT;
      cache.clear();
    },
    stop: async () => {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

function messageBody(reply: Extract<Reply, { type: 'message' }>, recorded: RecordedRequest, usage: ReportedUsage): unknown {
  return {
    id: `msg_${randomBytes(12).toString('hex')}`,
    type: 'message',
    role: 'assistant',
    model: recorded.body?.model,
    content: reply.content.map(toWireBlock),
    stop_reason: reply.stopReason,
    stop_details: reply.stopDetails ?? null,
    stop_sequence: null,
    usage,
  };
}

// ---- reply helpers ----

export function toolUse(name: string, input: unknown, options: { text?: string } = {}): Reply {
  const content: ReplyBlock[] = options.text ? [{ type: 'text', text: options.text }] : [];
  content.push({ type: 'tool_use', name, input });
  return { type: 'message', content, stopReason: 'tool_use' };
}

export function toolUses(calls: { name: string; input: unknown }[]): Reply {
  return { type: 'message', content: calls.map((c) => ({ type: 'tool_use', name: c.name, input: c.input })), stopReason: 'tool_use' };
}

export function endTurn(text: string): Reply {
  return { type: 'message', content: [{ type: 'text', text }], stopReason: 'end_turn' };
}

export function done(summary: string): Reply {
  return endTurn(`DONE. ${summary}`);
}

export function truncated(text: string): Reply {
  return { type: 'message', content: [{ type: 'text', text }], stopReason: 'max_tokens' };
}

/** As the API says a classifier's refusal: its policy category and explanation, when it has them. */
export function refusal(details: { category?: string | null; explanation?: string | null } = {}): Reply {
  return {
    type: 'message', content: [], stopReason: 'refusal',
    stopDetails: { type: 'refusal', category: details.category ?? null, explanation: details.explanation ?? null },
  };
}

export function apiError(status: number, message: string, headers?: Record<string, string>): Reply {
  return { type: 'error', status, message, ...(headers ? { headers } : {}) };
}

export function dropConnection(): Reply {
  return { type: 'drop' };
}

/** Sends the headers and half the body of `reply`, then closes the socket. */
export function dropMidReply(reply: Reply): Reply {
  if (reply.type !== 'message') throw new Error('dropMidReply cuts a message reply short');
  return { type: 'drop', midReply: reply };
}

export function slow(ms: number, then: Reply): Reply {
  return { type: 'delay', ms, then };
}

/** The lines of the <completed_steps> section of a Step prompt ([] when it says none yet). */
export function completedStepLines(prompt: string): string[] {
  const open = '<completed_steps>\n';
  const start = prompt.indexOf(open);
  const end = prompt.indexOf('\n</completed_steps>');
  if (start < 0 || end < 0) throw new Error('not a Step prompt: no <completed_steps> section');
  const section = prompt.slice(start + open.length, end);
  return section === '(none yet)' ? [] : section.split('\n');
}

// ---- requests ----

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function record(req: IncomingMessage, raw: string): RecordedRequest {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  let body: MessagesBody | undefined;
  try {
    body = JSON.parse(raw) as MessagesBody;
  } catch {
    body = undefined;
  }
  return {
    method: req.method ?? '',
    path: req.url ?? '',
    headers,
    body,
    userText: body ? userText(body) : '',
    retryCount: Number(headers['x-stainless-retry-count'] ?? 0),
  };
}

function userText(body: MessagesBody): string {
  const parts: string[] = [];
  for (const message of body.messages ?? []) {
    if (message.role !== 'user') continue;
    if (typeof message.content === 'string') parts.push(message.content);
    else if (Array.isArray(message.content)) {
      for (const block of message.content as { type?: unknown; text?: unknown }[]) {
        if (block.type === 'text' && typeof block.text === 'string') parts.push(block.text);
      }
    }
  }
  return parts.join('');
}

/** The API's own refusals, so a request our adapter builds wrongly fails here as it would in production. */
function checkRequest(req: IncomingMessage, recorded: RecordedRequest, apiKey: string | undefined): Reply | undefined {
  if (req.method !== 'POST' || !recorded.path.startsWith('/v1/messages')) {
    return { type: 'error', status: 404, errorType: 'not_found_error', message: `no route ${req.method} ${recorded.path}` };
  }
  const bearer = /^Bearer (.+)$/.exec(recorded.headers.authorization ?? '')?.[1];
  const key = recorded.headers['x-api-key'] ?? bearer;
  if (!key) return apiError(401, 'missing credentials: send x-api-key or Authorization: Bearer');
  if (apiKey !== undefined && key !== apiKey) return apiError(401, 'invalid x-api-key');
  if (!recorded.headers['anthropic-version']) return apiError(400, 'anthropic-version: header is required');
  const body = recorded.body;
  if (!body) return apiError(400, 'the request body is not valid JSON');
  if (typeof body.model !== 'string' || !body.model) return apiError(400, 'model: Field required');
  if (!Number.isInteger(body.max_tokens) || (body.max_tokens as number) < 1) return apiError(400, 'max_tokens: must be a positive integer');
  if (!Array.isArray(body.messages) || body.messages.length === 0) return apiError(400, 'messages: at least one message is required');
  let breakpoints = 0;
  for (const t of body.tools ?? []) {
    if (typeof t.name !== 'string' || typeof t.input_schema !== 'object' || (t.input_schema as { type?: unknown }).type !== 'object') {
      return apiError(400, `tools: each tool needs a name and an input_schema of type "object"`);
    }
    if (t.cache_control) breakpoints++;
  }
  for (const [i, message] of body.messages.entries()) {
    if (!Array.isArray(message.content)) continue;
    for (const [j, block] of (message.content as Record<string, unknown>[]).entries()) {
      if (block.type === 'text' && (typeof block.text !== 'string' || block.text.trim() === '')) {
        return apiError(400, `messages.${i}.content.${j}.text: text content blocks must contain non-whitespace text`);
      }
      if (block.cache_control) breakpoints++;
    }
  }
  if (breakpoints > MAX_CACHE_BREAKPOINTS) {
    return apiError(400, `A maximum of ${MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found ${breakpoints}.`);
  }
  return undefined;
}

// ---- responses ----

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'request-id': `req_${randomBytes(8).toString('hex')}`,
    ...headers,
  });
  res.end(text);
}

function errorBody(type: string, message: string, errorCode?: string): unknown {
  return { type: 'error', error: { type, message, ...(errorCode ? { details: { error_code: errorCode } } : {}) } };
}

function errorTypeFor(status: number): string {
  switch (status) {
    case 400: return 'invalid_request_error';
    case 401: return 'authentication_error';
    case 402: return 'billing_error';
    case 403: return 'permission_error';
    case 404: return 'not_found_error';
    case 413: return 'request_too_large';
    case 429: return 'rate_limit_error';
    case 529: return 'overloaded_error';
    default: return 'api_error';
  }
}

function toWireBlock(block: ReplyBlock): Record<string, unknown> {
  switch (block.type) {
    case 'text': return { type: 'text', text: block.text, citations: null };
    case 'thinking': return { type: 'thinking', thinking: block.thinking, signature: 'sig' };
    case 'tool_use': return { type: 'tool_use', id: `toolu_${randomBytes(10).toString('hex')}`, name: block.name, input: block.input };
  }
}

// ---- prompt cache ----

/** Tokens as the bench and tests count them: a rough bytes / 4, rounded up per block. */
export function estimateTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text, 'utf8') / 4);
}

interface Segment { key: string; tokens: number; breakpoint: boolean }

/**
 * The prompt cache of one server. Entries are keyed by a hash chained over the model and every block up
 * to a breakpoint, so an entry matches only a byte-identical prefix ending at the same block boundary.
 */
class PromptCache {
  private readonly entries = new Map<string, number>();

  constructor(private readonly config: { minTokens: number; lookback: number; ttlMs: number; now: () => number }) {}

  clear(): void {
    this.entries.clear();
  }

  usageFor(body: MessagesBody, content: ReplyBlock[]): ReportedUsage {
    const segments = segmentsOf(body);
    const hashes: string[] = [];
    const totals: number[] = [];
    let hash = sha256(`model:${String(body.model)}`);
    let total = 0;
    for (const segment of segments) {
      hash = sha256(hash + segment.key);
      total += segment.tokens;
      hashes.push(hash);
      totals.push(total);
    }
    const now = this.config.now();
    const breakpoints = segments.flatMap((s, i) => (s.breakpoint ? [i] : []));

    // Read: the longest live entry at a boundary within the lookback window of some breakpoint.
    let readAt = -1;
    for (const b of breakpoints) {
      for (let i = b; i >= 0 && i > b - this.config.lookback && i > readAt; i--) {
        const expires = this.entries.get(hashes[i]!);
        if (expires !== undefined && expires > now) { readAt = i; break; }
      }
    }
    const read = readAt >= 0 ? totals[readAt]! : 0;
    if (readAt >= 0) this.entries.set(hashes[readAt]!, now + this.config.ttlMs);

    // Write: every breakpoint past the read point whose prefix is long enough to be cached.
    let writtenTo = readAt;
    for (const b of breakpoints) {
      if (b <= readAt || totals[b]! < this.config.minTokens) continue;
      this.entries.set(hashes[b]!, now + this.config.ttlMs);
      writtenTo = Math.max(writtenTo, b);
    }
    const written = writtenTo > readAt ? totals[writtenTo]! - read : 0;
    return {
      input_tokens: total - read - written,
      output_tokens: Math.max(1, estimateTokens(JSON.stringify(content))),
      cache_creation_input_tokens: written,
      cache_read_input_tokens: read,
      cache_creation: { ephemeral_5m_input_tokens: written, ephemeral_1h_input_tokens: 0 },
      service_tier: 'standard',
    };
  }
}

/** The request's cacheable prefix order: tools, then system, then each message's blocks. */
function segmentsOf(body: MessagesBody): Segment[] {
  const segments: Segment[] = [];
  for (const t of body.tools ?? []) {
    const { cache_control, ...rest } = t;
    const key = `tool:${JSON.stringify(rest)}`;
    segments.push({ key, tokens: estimateTokens(key), breakpoint: Boolean(cache_control) });
  }
  for (const block of blocksOf(body.system)) segments.push(segmentOf('system', block));
  for (const [i, message] of (body.messages ?? []).entries()) {
    for (const block of blocksOf(message.content)) segments.push(segmentOf(`message ${i} ${String(message.role)}`, block));
  }
  return segments;
}

function blocksOf(content: unknown): Record<string, unknown>[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content) ? (content as Record<string, unknown>[]) : [];
}

function segmentOf(where: string, block: Record<string, unknown>): Segment {
  const { cache_control, ...rest } = block;
  const key = `${where}:${JSON.stringify(rest)}`;
  const tokens = typeof rest.text === 'string' ? estimateTokens(rest.text) : estimateTokens(JSON.stringify(rest));
  return { key, tokens, breakpoint: Boolean(cache_control) };
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
