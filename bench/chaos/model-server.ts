/**
 * The chaos schedules' model: the real Anthropic adapter (lib/llm/anthropic.ts, the SDK's retries and
 * timeouts included) against the local Messages API server (test/support/messages-server.ts), one server
 * per process shared by the schedules. Each schedule registers a script under its own key; the goal of each
 * of its runs names the key, so the server answers every request from the script of the schedule it is for.
 */
import { AnthropicModel } from '../../lib/llm/anthropic.ts';
import { apiError, startMessagesServer, type MessagesServer, type RecordedRequest, type Reply } from '../../test/support/messages-server.ts';

const API_KEY = 'chaos-key';
/**
 * One HTTP attempt: a reply slower than this is given up (a scripted slow reply takes SLOW_REPLY_MS). Long
 * enough that a local reply on a loaded machine is not given up too: that would add a request the seed did
 * not draw, and the schedule would no longer replay exactly.
 */
export const ATTEMPT_TIMEOUT_MS = 750;
export const SLOW_REPLY_MS = 1_500;
/** The SDK's retries per call, as in production: a burst longer than this reaches the engine. */
export const MAX_RETRIES = 2;

export type Script = (request: RecordedRequest) => Reply;

const scripts = new Map<string, Script>();
let served = 0;
let shared: Promise<MessagesServer> | undefined;

/** Where a request is from: the schedule key in its goal ("chaos <key> <run>: ..."). */
const KEY = /chaos (s\d+) /;

/** The process's server, started on first use. */
export async function chaosModelServer(): Promise<MessagesServer & { served(): number }> {
  shared ??= startMessagesServer({ apiKey: API_KEY, minCacheableTokens: 0 }).then((server) => {
    server.otherwise((request) => {
      // Nothing of a request is kept past its answer: a thousand schedules would hold every prompt.
      server.requests.length = 0;
      served++;
      const script = scripts.get(KEY.exec(request.userText)?.[1] ?? '');
      return script ? script(request) : apiError(400, 'chaos model server: no schedule has this request');
    });
    return server;
  });
  const server = await shared;
  return Object.assign(server, { served: () => served });
}

export async function stopChaosModelServer(): Promise<void> {
  const pending = shared;
  shared = undefined;
  if (pending) await (await pending).stop();
}

let nextKey = 0;

/** Registers a schedule's script; returns its key (for its goals), its model, and how to let go of it. */
export async function registerSchedule(script: Script): Promise<{ key: string; model: AnthropicModel; release(): void }> {
  const server = await chaosModelServer();
  const key = `s${nextKey++}`;
  scripts.set(key, script);
  const model = new AnthropicModel({
    apiKey: API_KEY, baseURL: server.url, model: 'claude-chaos', env: {},
    maxRetries: MAX_RETRIES, attemptTimeoutMs: ATTEMPT_TIMEOUT_MS, deadlineMs: 30_000,
  });
  return { key, model, release: () => { scripts.delete(key); } };
}

/** The goal of a run of a registered schedule. */
export const goalOf = (key: string, runId: string, steps: number): string => `chaos ${key} ${runId}: do ${steps} steps`;
/** Which run of its schedule a request is for. */
export const runOf = (request: RecordedRequest): string | undefined => /chaos s\d+ (\S+):/.exec(request.userText)?.[1];
