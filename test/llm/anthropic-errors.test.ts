import { getEventListeners } from 'node:events';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { toolSpecs } from '../../lib/agent.ts';
import { InvalidInputError, ModelKeyError, PermanentError, TransientError } from '../../lib/core/errors.ts';
import { renderStepPrompt } from '../../lib/core/prompt.ts';
import { AnthropicModel, type AnthropicModelOptions } from '../../lib/llm/anthropic.ts';
import type { ModelRequest } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import {
  apiError, done, dropConnection, dropMidReply, slow, startMessagesServer, toolUse, type MessagesServer,
} from '../support/messages-server.ts';
import { stateAfter } from '../support/states.ts';

const agent = rowsAgent(new FakeRows());
const request = (signal?: AbortSignal): ModelRequest => ({
  runId: 'run-e', step: 3, prompt: renderStepPrompt(stateAfter('run-e', 2)), tools: toolSpecs(agent), settings: {},
  ...(signal ? { signal } : {}),
});
/** Retry right away: the SDK obeys retry-after-ms, so tests do not sit through its 0.5 s+ backoff. */
const NOW = { 'retry-after-ms': '1' };

describe('Anthropic adapter errors', () => {
  let server: MessagesServer;
  const modelWith = (options: AnthropicModelOptions = {}) => new AnthropicModel({ apiKey: 'test-key', baseURL: server.url, env: {}, ...options });
  beforeAll(async () => { server = await startMessagesServer({ apiKey: 'test-key' }); });
  afterAll(() => server.stop());
  beforeEach(() => {
    server.reset();
  });

  it('429 with retry-after, then success: retried by the SDK, the step gets its reply', async () => {
    server.script(apiError(429, 'rate limited', { 'retry-after': '0.01' }), toolUse('write_row', { row: 3 }));
    const reply = await modelWith().decide(request());
    expect(reply).toMatchObject({ kind: 'tool', tool: 'write_row', input: { row: 3 } });
    expect(server.requests.map((r) => [r.retryCount, r.outcome])).toEqual([[0, 429], [1, 200]]);
  });

  it('a step of the system clock an hour forward during the call does not end its retries: 529, then the reply', async () => {
    // The clock steps (NTP, a VM restored) as the first attempt is answered, after the call took its deadline.
    const realNow = Date.now.bind(Date);
    let stepped = 0;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + stepped);
    try {
      server.script(() => { stepped = 3_600_000; return apiError(529, 'Overloaded', NOW); }, toolUse('write_row', { row: 3 }));
      const reply = await modelWith().decide(request());
      expect(reply).toMatchObject({ kind: 'tool', tool: 'write_row', input: { row: 3 } });
      expect(server.requests.map((r) => [r.retryCount, r.outcome])).toEqual([[0, 529], [1, 200]]);
    } finally {
      clock.mockRestore();
    }
  });

  it('persistent 529 overloaded: TransientError after the bounded retries', async () => {
    server.otherwise(apiError(529, 'Overloaded', NOW));
    const error = await modelWith({ maxRetries: 2 }).decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message).toMatch(/529 overloaded_error: Overloaded.*after retries/);
    expect(server.requests.map((r) => r.retryCount)).toEqual([0, 1, 2]);
  });

  it('persistent 500: TransientError after the retries', async () => {
    server.otherwise(apiError(500, 'Internal server error', NOW));
    await expect(modelWith({ maxRetries: 1 }).decide(request())).rejects.toBeInstanceOf(TransientError);
    expect(server.requests).toHaveLength(2);
  });

  it.each([
    [400, 'prompt is too long: 1200000 tokens > 1000000 maximum', /400 invalid_request_error: prompt is too long/],
    [404, 'model: claude-nope', /404 not_found_error: model: claude-nope/],
    [413, 'Request exceeds the maximum allowed number of bytes', /413 request_too_large/],
  ])('%i: PermanentError with the reason, not retried', async (status, message, reason) => {
    server.script(apiError(status, message, NOW));
    const error = await modelWith().decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PermanentError);
    expect((error as Error).message).toMatch(reason);
    expect(server.requests).toHaveLength(1);
  });

  it('a 404 for the model names the model id sent and the settings it comes from', async () => {
    // The API says only "model: claude-3-opus-20240229"; a retired id fails every run at once.
    server.script({ type: 'error', status: 404, errorType: 'not_found_error', message: 'model: claude-3-opus-20240229', headers: NOW });
    const error = await modelWith().decide({ ...request(), settings: { model: 'claude-3-opus-20240229' } }).then(() => new Error('no error'), (e: unknown) => e as Error);
    expect(error).toBeInstanceOf(PermanentError);
    expect(error.message).toMatch(/^the Anthropic API refused the request: 404 not_found_error: model: claude-3-opus-20240229 \(request req_\w+\); the request named model "claude-3-opus-20240229" \(the agent's settings\.model, else STEPWISE_MODEL, else claude-opus-5-5\): a retired or misspelt id\? set a current one, then `stepwise retry run-e`$/);
    // Other refusals are as they were.
    server.script(apiError(400, 'prompt is too long', NOW));
    expect((await modelWith().decide(request()).then(() => new Error('no error'), (e: unknown) => e as Error)).message).not.toMatch(/named model/);
  });

  it('a refusal that points at a tool by its place in the request names the tool', async () => {
    const names = toolSpecs(agent).map((t) => t.name);
    server.script(apiError(400, 'tools.1.custom.input_schema: JSON schema is invalid; tools.9 is not there', NOW));
    const error = await modelWith().decide(request()).then(() => new Error('no error'), (e: unknown) => e as Error);
    expect(error).toBeInstanceOf(PermanentError);
    expect(error.message).toContain(`400 invalid_request_error: tools.1 (tool ${names[1]}).custom.input_schema: JSON schema is invalid; tools.9 is not there`);
  });

  it.each([
    [401, 'invalid x-api-key', /401 authentication_error: invalid x-api-key/],
    [403, 'your key may not use this model', /403 permission_error/],
  ])('%i: ModelKeyError (the work pauses), neither permanent nor retried by the SDK', async (status, message, reason) => {
    server.script(apiError(status, message, NOW));
    const error = await modelWith().decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelKeyError);
    expect(error).not.toBeInstanceOf(PermanentError);
    expect((error as Error).message).toMatch(reason);
    // The key is read again, but it is the same: no second request.
    expect(server.requests).toHaveLength(1);
  });

  it('out of credit (402) or over a spend limit (429 with its code): ModelKeyError, the work pauses until the bill is paid', async () => {
    server.script(apiError(402, 'Your credit balance is too low to access the Anthropic API.', NOW));
    const billing = await modelWith().decide(request()).catch((e: unknown) => e);
    expect(billing).toBeInstanceOf(ModelKeyError);
    expect((billing as Error).message).toMatch(/will not bill the key's organization: 402 billing_error: Your credit balance is too low/);
    expect(server.requests).toHaveLength(1);

    server.reset();
    server.otherwise({ type: 'error', status: 429, message: 'monthly usage threshold crossed', errorCode: 'enforced_spend_limit_reached', headers: NOW });
    const limit = await modelWith().decide(request()).catch((e: unknown) => e);
    expect(limit).toBeInstanceOf(ModelKeyError);
    expect((limit as Error).message).toMatch(/will not bill the key's organization: 429 rate_limit_error: monthly usage threshold crossed/);

    // A plain rate limit is still an outage to wait out, counted.
    server.reset();
    server.otherwise(apiError(429, 'rate limited', NOW));
    const rate = await modelWith({ maxRetries: 0 }).decide(request()).catch((e: unknown) => e);
    expect(rate).toBeInstanceOf(TransientError);
  });

  it('an error page that is not the API\'s (a proxy\'s HTML 413 or 502): its start on one line in the reason, the status said once', async () => {
    const page = (status: number, title: string) => `<html>\r\n<head><title>${status} ${title}</title></head>\r\n<body>\r\n<center><h1>${status} ${title}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n${'<!-- a padding to disable MSIE and Chrome friendly error page -->\r\n'.repeat(6)}`;
    server.script({ type: 'raw', status: 413, body: page(413, 'Request Entity Too Large'), headers: { 'content-type': 'text/html' } });
    const tooLarge = await modelWith().decide(request()).catch((e: unknown) => e);
    expect(tooLarge).toBeInstanceOf(PermanentError);
    expect((tooLarge as Error).message).toMatch(/^the Anthropic API refused the request: 413: <html> <head><title>413 Request Entity Too Large<\/title>/);

    server.otherwise({ type: 'raw', status: 502, body: page(502, 'Bad Gateway'), headers: { 'content-type': 'text/html', ...NOW } });
    const gateway = await modelWith({ maxRetries: 0 }).decide(request()).catch((e: unknown) => e);
    expect(gateway).toBeInstanceOf(TransientError);
    for (const error of [tooLarge, gateway]) {
      const { message } = error as Error;
      expect(message).not.toMatch(/[\r\n]/);
      expect(message.length).toBeLessThan(300);
    }
  });

  it('a wrong key is a 401 from the server: ModelKeyError', async () => {
    await expect(modelWith({ apiKey: 'wrong-key' }).decide(request())).rejects.toThrow(ModelKeyError);
    await expect(modelWith({ apiKey: 'wrong-key' }).decide(request())).rejects.toThrow(/401 authentication_error/);
  });

  it('a dropped connection is retried', async () => {
    server.script(dropConnection(), toolUse('count_rows', {}));
    expect(await modelWith().decide(request())).toMatchObject({ kind: 'tool', tool: 'count_rows' });
    expect(server.requests.map((r) => r.outcome)).toEqual(['dropped', 200]);
  });

  it('connections dropped every time: TransientError after the retries', async () => {
    server.otherwise(dropConnection());
    const error = await modelWith({ maxRetries: 1 }).decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message).toMatch(/cannot reach the Anthropic API/);
    expect(server.requests).toHaveLength(2);
  });

  it('a connection dropped mid-reply (the headers and half the body sent): TransientError, and the next call gets its reply', async () => {
    server.script(dropMidReply(toolUse('count_rows', {})), toolUse('write_row', { row: 3 }));
    const error = await modelWith().decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect(server.requests.map((r) => r.outcome)).toEqual(['dropped']);
    expect(await modelWith().decide(request())).toMatchObject({ kind: 'tool', tool: 'write_row' });
  });

  it('an attempt slower than its timeout is given up and retried by the SDK: the retry\'s reply is the step\'s', async () => {
    server.script(slow(5_000, done('too late')), toolUse('write_row', { row: 3 }));
    expect(await modelWith({ attemptTimeoutMs: 200 }).decide(request())).toMatchObject({ kind: 'tool', tool: 'write_row' });
    expect(server.requests.map((r) => [r.retryCount, r.outcome])).toEqual([[0, undefined], [1, 200]]);
  });

  it('a reply slower than the deadline: TransientError, without waiting for it', async () => {
    server.otherwise(slow(60_000, done('too late')));
    const error = await modelWith({ deadlineMs: 300 }).decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message).toMatch(/deadline/);
    expect(server.requests.every((r) => r.outcome === undefined)).toBe(true);
  });

  it('a retry-after longer than the time left is not slept through: TransientError at once', async () => {
    server.script(apiError(429, 'rate limited', { 'retry-after': '120' }), toolUse('count_rows', {}));
    const error = await modelWith({ deadlineMs: 30_000 }).decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message).toMatch(/429 rate_limit_error.*retry after 120 s, past this call's deadline/);
    // The step's next try waits for it (failureDelayMs): the engine reads it from the error.
    expect((error as TransientError).retryAfterMs).toBe(120_000);
    expect(server.requests).toHaveLength(1);
  });

  it('a 529 after the SDK\'s retries carries the last retry-after; a 500 without one carries none', async () => {
    server.script(...Array.from({ length: 3 }, () => apiError(529, 'Overloaded', { 'retry-after-ms': '2' })));
    const overloaded = await modelWith({ maxRetries: 2 }).decide(request()).catch((e: unknown) => e);
    expect((overloaded as TransientError).retryAfterMs).toBe(2);
    server.reset();
    server.script(apiError(500, 'boom'));
    const failed = await modelWith({ maxRetries: 0 }).decide(request()).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(TransientError);
    expect((failed as TransientError).retryAfterMs).toBeUndefined();
  });

  it('the caller\'s signal ends the call: TransientError', async () => {
    server.otherwise(slow(60_000, done('too late')));
    const controller = new AbortController();
    const pending = modelWith().decide(request(controller.signal)).catch((e: unknown) => e);
    while (server.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    const error = await pending;
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message).toMatch(/cancelled/);
  });

  it('a signal the caller keeps for its life, given to every call, keeps nothing of any call once it has ended', async () => {
    // AbortSignal.any, on Node 20, left a signal in its sources' keeping for each call until they abort.
    const shutdown = new AbortController();
    const model = modelWith();
    for (let i = 0; i < 20; i++) {
      server.script(toolUse('write_row', { row: i }));
      expect(await model.decide(request(shutdown.signal))).toMatchObject({ kind: 'tool', input: { row: i } });
    }
    const key = Object.getOwnPropertySymbols(shutdown.signal).find((symbol) => symbol.description === 'kDependantSignals');
    expect(key ? (shutdown.signal as unknown as Record<symbol, Set<unknown>>)[key]!.size : 0).toBe(0);
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
  });

  it('a 200 that is not a message (a gateway\'s page, other JSON): TransientError that says so, not a TypeError', async () => {
    const cases = [
      ['<html>gateway</html>', /answered 200 with something that is not a message \(a string, not an object\): <html>gateway<\/html>$/],
      ['{}', /not a message \(no content list\): \{\}$/],
      ['{"type":"message","content":"nope"}', /not a message \(no content list\)/],
      ['{"type":"message","content":[{"type":"text","text":"DONE"}]}', /not a message \(no usage\)/],
      ['[1]', /not a message \(a list, not an object\)/],
    ] as const;
    for (const [body, message] of cases) {
      server.script({ type: 'raw', status: 200, body, ...(body.startsWith('<') ? { headers: { 'content-type': 'text/html' } } : {}) });
      const error = await modelWith().decide(request()).catch((e: unknown) => e);
      expect(error, body).toBeInstanceOf(TransientError);
      expect((error as Error).message, body).toContain(`the Messages API at ${server.url}`);
      expect((error as Error).message, body).toMatch(message);
    }
  });

  it('a message sent as text/plain (a gateway that labels it so) is read as the message; other text is still refused', async () => {
    const message = { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'text', text: 'DONE all rows copied' }], stop_reason: 'end_turn', usage: { input_tokens: 12, output_tokens: 5 } };
    server.script({ type: 'raw', status: 200, body: JSON.stringify(message), headers: { 'content-type': 'text/plain; charset=utf-8' } });
    expect(await modelWith().decide(request())).toMatchObject({ kind: 'done', summary: 'all rows copied', usage: { inputTokens: 12, outputTokens: 5 } });
    for (const [body, said] of [['{"type":"message"', /\(a string, not an object\)/], ['{}', /\(no content list\)/]] as const) {
      server.script({ type: 'raw', status: 200, body, headers: { 'content-type': 'text/plain' } });
      const error = await modelWith().decide(request()).catch((e: unknown) => e);
      expect(error, body).toBeInstanceOf(TransientError);
      expect((error as Error).message, body).toMatch(said);
    }
  });

  it('a 200 whose body is not JSON (cut short, empty, a page sent as JSON): TransientError that names the API and says so', async () => {
    // It was the bare "the model call failed: Unterminated string in JSON at position 49".
    for (const body of ['{"id":"msg_1","type":"message","content":[{"type":"te', '', '<html>502 Bad Gateway</html>']) {
      server.script({ type: 'raw', status: 200, body });
      const error = await modelWith().decide(request()).catch((e: unknown) => e);
      expect(error, body).toBeInstanceOf(TransientError);
      expect((error as Error).message, body).toMatch(new RegExp(`^the Messages API at ${server.url} answered 200 with a body that is not JSON \\(cut short, empty, or not the API's\\): \\S`));
    }
    expect(server.requests).toHaveLength(3);
  });

  it('no key configured: PermanentError before any request', async () => {
    const model = new AnthropicModel({ baseURL: server.url, env: {} });
    await expect(model.decide(request())).rejects.toThrow(PermanentError);
    await expect(model.decide(request())).rejects.toThrow(/ANTHROPIC_API_KEY/);
    expect(server.requests).toHaveLength(0);
  });

  it.each([
    ['a shortened copy', 'sk-ant-api03-abc…', /character 17 of its 17 is U\+2026/],
    ['two lines', 'sk-ant-api03-abc\nsk-ant-api03-def', /character 17 of its 33 is U\+000A/],
    ['a typographic dash', 'sk‑ant-api03-abc', /character 3 of its 16 is U\+2011/],
    ['an invisible space', 'sk-ant-api03-abc\u200b', /character 17 of its 17 is U\+200B/],
  ])('a key with %s: ModelKeyError (the work pauses) saying which character, never the key, before any request', async (_label, key, reason) => {
    const error = await modelWith({ apiKey: key }).decide(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelKeyError);
    expect((error as Error).message).toMatch(/^the Anthropic API key cannot be sent: /);
    expect((error as Error).message).toMatch(reason);
    expect((error as Error).message).not.toContain('sk-ant');
    expect(server.requests).toHaveLength(0);
  });

  it('the server accepts both auth header styles; the SDK sends a bearer token', async () => {
    server.script(done('bearer'), done('x-api-key'), done('nothing'));
    await modelWith().decide(request());
    expect(server.requests[0]!.headers.authorization).toBe('Bearer test-key');

    const body = JSON.stringify({ model: 'claude-opus-5-5', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] });
    const viaApiKey = await fetch(`${server.url}/v1/messages`, {
      method: 'POST', body, headers: { 'content-type': 'application/json', 'x-api-key': 'test-key', 'anthropic-version': '2023-06-01' },
    });
    expect(viaApiKey.status).toBe(200);
    expect(((await viaApiKey.json()) as { content: { text: string }[] }).content[0]!.text).toBe('DONE. x-api-key');

    const anonymous = await fetch(`${server.url}/v1/messages`, {
      method: 'POST', body, headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    });
    expect(anonymous.status).toBe(401);
  });

  it('a base URL with credentials, which fetch refuses to send, is refused when the model is made, its credentials masked', () => {
    // It failed every step as the model unreachable, waited out for 30 tries, with fetch naming the password.
    const made = () => new AnthropicModel({ apiKey: 'test-key', baseURL: 'http://gw-user:s3cret-pass@127.0.0.1:9/', env: {}, maxRetries: 0 });
    expect(made).toThrow(InvalidInputError);
    expect(made).toThrow('ANTHROPIC_BASE_URL (or baseURL) http://***:***@127.0.0.1:9/ carries a user and password, which fetch refuses to send');
    expect(() => made()).not.toThrow(/s3cret-pass|gw-user/);
  });

  it('a base URL that is no http(s) URL is refused when the model is made', () => {
    for (const baseURL of ['127.0.0.1:8080', 'localhost', 'ftp://gateway.example/']) {
      expect(() => new AnthropicModel({ apiKey: 'test-key', baseURL, env: {} }), baseURL).toThrow(`ANTHROPIC_BASE_URL (or baseURL) must be an http:// or https:// URL, got "${baseURL}"`);
    }
    expect(new AnthropicModel({ apiKey: 'test-key', env: { ANTHROPIC_BASE_URL: ' https://gateway.example/anthropic ' } })).toBeInstanceOf(AnthropicModel);
  });
});
