import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { toolSpecs } from '../../lib/agent.ts';
import { replyProblem } from '../../lib/core/model-reply.ts';
import { promptText, renderStepPrompt, type PromptBlock } from '../../lib/core/prompt.ts';
import { AnthropicModel, DEFAULT_MAX_TOKENS, DEFAULT_MODEL, MAX_CACHE_BREAKPOINTS, userContent } from '../../lib/llm/anthropic.ts';
import type { ModelRequest, ModelSettings } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import {
  done, endTurn, refusal, startMessagesServer, toolUse, toolUses, truncated, type MessagesServer, type Reply,
} from '../support/messages-server.ts';
import { stateAfter } from '../support/states.ts';

const agent = rowsAgent(new FakeRows());

function stepRequest(completed: number, settings: ModelSettings = {}): ModelRequest {
  return { runId: 'run-a', step: completed + 1, prompt: renderStepPrompt(stateAfter('run-a', completed)), tools: toolSpecs(agent), settings };
}

interface TextBlock { type: string; text: string; cache_control?: { type: string } }
function sentBlocks(server: MessagesServer, index: number): TextBlock[] {
  return server.requests[index]!.body!.messages![0]!.content as TextBlock[];
}

describe('Anthropic adapter through the SDK and the local Messages server', () => {
  let server: MessagesServer;
  let model: AnthropicModel;
  beforeAll(async () => {
    server = await startMessagesServer({ apiKey: 'test-key', minCacheableTokens: 0 });
    model = new AnthropicModel({ apiKey: 'test-key', baseURL: server.url, env: {} });
  });
  afterAll(() => server.stop());
  beforeEach(() => {
    server.reset();
  });

  it('sends the Step prompt word for word as the user message, the tools as JSON Schema, cache_control on the flagged block', async () => {
    server.script(toolUse('write_row', { row: 4 }));
    const request = stepRequest(3);
    await model.decide(request);

    const sent = server.requests[0]!;
    expect(sent.body!.messages).toHaveLength(1);
    expect(sent.body!.messages![0]!.role).toBe('user');
    expect(sent.userText).toBe(promptText(request.prompt));
    expect(sent.userText).toContain('<goal>copy the rows</goal>');

    // The flagged block is the last completed step: the breakpoint's prefix ends exactly there.
    const blocks = sentBlocks(server, 0);
    const marked = blocks.filter((b) => b.cache_control);
    expect(marked).toHaveLength(1);
    expect(marked[0]!.cache_control).toEqual({ type: 'ephemeral' });
    const flaggedAt = request.prompt.findIndex((b) => b.cache);
    const cachedPrefix = blocks.slice(0, blocks.indexOf(marked[0]!) + 1).map((b) => b.text).join('');
    expect(cachedPrefix).toBe(promptText(request.prompt.slice(0, flaggedAt + 1)));

    expect(sent.body!.tools).toEqual(toolSpecs(agent).map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema })));
    expect(sent.body!.tools![0]!.input_schema).toMatchObject({ type: 'object', properties: { row: { type: 'integer' } }, required: ['row'] });
    expect(sent.body!.model).toBe(DEFAULT_MODEL);
    expect(sent.body!.max_tokens).toBe(DEFAULT_MAX_TOKENS);
    expect(sent.body).not.toHaveProperty('temperature');
  });

  it('turns a tool_use reply into one tool call, with the usage and the model the server reported', async () => {
    server.script(toolUse('write_row', { row: 2 }, { text: 'Writing row 2 next.' }));
    const reply = await model.decide(stepRequest(1));
    const reported = server.requests[0]!.usage!;
    expect(reply).toEqual({
      kind: 'tool', tool: 'write_row', input: { row: 2 }, model: server.requests[0]!.body!.model,
      usage: {
        inputTokens: reported.input_tokens, outputTokens: reported.output_tokens,
        cacheWriteTokens: reported.cache_creation_input_tokens, cacheReadTokens: reported.cache_read_input_tokens,
      },
    });
    expect(reported.input_tokens + reported.cache_creation_input_tokens).toBeGreaterThan(0);
    // In key order, as the step record that keeps it: its canonical JSON copies nothing.
    expect(Object.keys(reply.kind === 'tool' ? reply.usage! : {})).toEqual(['cacheReadTokens', 'cacheWriteTokens', 'inputTokens', 'outputTokens']);
  });

  it('asks for at most one tool call per reply (disable_parallel_tool_use), and sends no tool_choice without tools', async () => {
    server.script(toolUse('write_row', { row: 1 }), done('nothing to do'));
    await model.decide(stepRequest(0));
    expect(server.requests[0]!.body!.tool_choice).toEqual({ type: 'auto', disable_parallel_tool_use: true });
    await model.decide({ ...stepRequest(0), tools: [] });
    expect(server.requests[1]!.body).not.toHaveProperty('tool_choice');
    expect(server.requests[1]!.body).not.toHaveProperty('tools');
  });

  it('ignores thinking blocks around the tool call', async () => {
    server.script({ type: 'message', stopReason: 'tool_use', content: [{ type: 'thinking', thinking: 'DONE? no.' }, { type: 'tool_use', name: 'count_rows', input: {} }] });
    expect(await model.decide(stepRequest(0))).toMatchObject({ kind: 'tool', tool: 'count_rows', input: {} });
  });

  it.each([
    ['DONE. Wrote all five rows, one per step.', 'Wrote all five rows, one per step.'],
    ['  DONE: Wrote all five rows.\n', 'Wrote all five rows.'],
    ['DONE\n\n— Wrote all five rows; nothing left.', 'Wrote all five rows; nothing left.'],
    ['DONE', ''],
    ['**DONE** Wrote all five rows.', 'Wrote all five rows.'],
    ['## DONE\n\nWrote all five rows.', 'Wrote all five rows.'],
    ['`DONE`: Wrote all five rows.', 'Wrote all five rows.'],
  ])('reads %j as DONE with its summary', async (text, summary) => {
    server.script(endTurn(text));
    const reply = await model.decide(stepRequest(5));
    expect(reply.kind).toBe('done');
    expect(reply).toMatchObject({ summary });
    expect(reply.usage?.outputTokens).toBeGreaterThan(0);
  });

  const invalid: [string, Reply, RegExp][] = [
    ['several tool calls', toolUses([{ name: 'write_row', input: { row: 1 } }, { name: 'count_rows', input: {} }]), /2 tool calls .*write_row, count_rows/],
    ['no tool call and no DONE', endTurn('I think we should write row 3.'), /no tool call and no DONE.*write row 3/],
    ['an empty reply', { type: 'message', content: [], stopReason: 'end_turn' }, /empty reply/],
    // Said as what it held, where it was "an empty reply".
    ['a reply of blocks the adapter does not read', {
      type: 'raw', status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({
        id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-sonnet-4-5', stop_reason: 'end_turn', stop_sequence: null,
        content: [{ type: 'server_tool_use', id: 's1', name: 'web_search', input: {} }, { type: 'thinking', thinking: 'hmm', signature: 'x' }],
        usage: { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
      }),
    },
      /^no text and no tool call, only server_tool_use, thinking blocks: no tool call and no DONE$/],
    ['DONE inside a word', endTurn('DONEGAL is a county.'), /no tool call and no DONE/],
    ['DONE inside a word, in Markdown', endTurn('**DONEGAL** is a county.'), /no tool call and no DONE/],
    ['DONE not at the start', endTurn('Not DONE yet: row 3 is left.'), /no tool call and no DONE/],
    ['max_tokens truncation', truncated('DONE. Wrote all the'), /cut off at max_tokens \(8192, the agent's settings.maxTokens\)/],
    ['a refusal', refusal(), /refused/],
  ];
  it.each(invalid)('returns %s as invalid with the reason, never throws', async (_name, reply, reason) => {
    server.script(reply);
    const result = await model.decide(stepRequest(2));
    expect(result.kind).toBe('invalid');
    expect(result).toMatchObject({ reason: expect.stringMatching(reason) });
    expect(result.usage).toBeDefined();
  });

  it('a refusal says the policy category and the explanation the API gave, in the reason the run and the model see', async () => {
    server.script(refusal({ category: 'cyber', explanation: 'The request could enable\nexploit development.' }));
    expect(await model.decide(stepRequest(2))).toMatchObject({
      kind: 'invalid', reason: 'the model refused to continue (stop_reason "refusal", category "cyber": The request could enable exploit development.)',
    });
    server.script(refusal());
    expect(await model.decide(stepRequest(2))).toMatchObject({ kind: 'invalid', reason: 'the model refused to continue (stop_reason "refusal")' });
  });

  it('a tool_use cut off by max_tokens is invalid, not a call with half its input', async () => {
    server.script({ type: 'message', stopReason: 'max_tokens', content: [{ type: 'tool_use', name: 'write_row', input: {} }] });
    expect(await model.decide(stepRequest(2))).toMatchObject({ kind: 'invalid', reason: expect.stringMatching(/max_tokens/) });
  });

  it('a gateway\'s reply with a null model, usage counts as strings or fractions, or a tool call without a name is one the engine can record, its usage counted', async () => {
    // Each was refused by the engine as the adapter's bug ("a reply the engine cannot record"): the step
    // failed a reply that was fine, and the call's tokens went uncounted.
    const body = (over: Record<string, unknown>) => JSON.stringify({
      id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-opus-5-5', stop_reason: 'end_turn', stop_sequence: null,
      content: [{ type: 'text', text: 'DONE. ok' }], usage: { input_tokens: 10, output_tokens: 5 }, ...over,
    });
    server.script(
      { type: 'raw', status: 200, body: body({ model: null }) },
      { type: 'raw', status: 200, body: body({ usage: { input_tokens: '120', output_tokens: 7.0000001, cache_creation_input_tokens: null, cache_read_input_tokens: -3 } }) },
      { type: 'raw', status: 200, body: body({ stop_reason: 'tool_use', content: [{ type: 'tool_use', id: 'toolu_1', input: {} }] }) },
    );
    const replies = [await model.decide(stepRequest(2)), await model.decide(stepRequest(2)), await model.decide(stepRequest(2))];
    for (const reply of replies) expect(replyProblem(reply)).toBeUndefined();
    expect(replies[0]).toEqual({ kind: 'done', summary: 'ok', usage: { cacheReadTokens: 0, cacheWriteTokens: 0, inputTokens: 10, outputTokens: 5 } });
    expect(replies[1]!.usage).toEqual({ cacheReadTokens: 0, cacheWriteTokens: 0, inputTokens: 120, outputTokens: 7 });
    expect(replies[2]).toMatchObject({ kind: 'invalid', reason: 'a tool call without a tool name', usage: { inputTokens: 10, outputTokens: 5 } });
  });

  it('sends the agent settings: model, max_tokens, temperature', async () => {
    server.script(done('ok'));
    await model.decide(stepRequest(0, { model: 'claude-sonnet-5-5', maxTokens: 2048, temperature: 0.2 }));
    expect(server.requests[0]!.body).toMatchObject({ model: 'claude-sonnet-5-5', max_tokens: 2048, temperature: 0.2 });
  });

  it('takes the default model from STEPWISE_MODEL; an agent setting still wins', async () => {
    const fromEnv = new AnthropicModel({ apiKey: 'test-key', baseURL: server.url, env: { STEPWISE_MODEL: 'claude-haiku-5-5' } });
    expect(fromEnv.name).toBe('anthropic:claude-haiku-5-5');
    server.script(done('a'), done('b'));
    await fromEnv.decide(stepRequest(0));
    await fromEnv.decide(stepRequest(0, { model: 'claude-opus-5-5' }));
    expect(server.requests.map((r) => r.body!.model)).toEqual(['claude-haiku-5-5', 'claude-opus-5-5']);
  });

  it('consecutive steps read the previous step\'s prefix from the cache', async () => {
    server.otherwise(toolUse('count_rows', {}));
    const replies = [];
    for (let n = 0; n <= 6; n++) replies.push(await model.decide(stepRequest(n)));
    // From the third step on, everything up to the previous breakpoint is a cache read.
    for (let n = 2; n <= 6; n++) {
      const previousPrefix = sentBlocks(server, n - 1);
      const cut = previousPrefix.findIndex((b) => b.cache_control) + 1;
      expect(sentBlocks(server, n).slice(0, cut)).toEqual(previousPrefix.slice(0, cut).map(({ cache_control: _c, ...b }) => b));
      expect(replies[n]!.usage!.cacheReadTokens).toBeGreaterThan(0);
      expect(replies[n]!.usage!.cacheReadTokens).toBe(server.requests[n - 1]!.usage!.cache_read_input_tokens + server.requests[n - 1]!.usage!.cache_creation_input_tokens);
    }
  });
});

describe('userContent', () => {
  it('joins to exactly the prompt, even with blank blocks, and keeps at most 4 breakpoints', () => {
    const prompt: PromptBlock[] = [
      { text: '  ' }, { text: 'head\n' }, { text: 'a', cache: true }, { text: '   ' }, { text: '\nb', cache: true }, { text: '\n', cache: true },
      { text: 'c', cache: true }, { text: 'd', cache: true }, { text: 'e', cache: true }, { text: '\ntail\n' },
    ];
    const blocks = userContent(prompt);
    expect(blocks.map((b) => b.text).join('')).toBe(promptText(prompt));
    expect(blocks.map((b) => b.text)).toEqual(['  head\n', 'a   ', '\nb\n', 'c', 'd', 'e', '\ntail\n']);
    expect(blocks.every((b) => b.text.trim() !== '')).toBe(true);
    // Five flagged blocks ('a   ', then '\nb\n' which also took the blank block's flag, c, d, e): the last four keep theirs.
    expect(blocks.filter((b) => b.cache_control).map((b) => b.text)).toEqual(['\nb\n', 'c', 'd', 'e']);
    expect(MAX_CACHE_BREAKPOINTS).toBe(4);
  });

  it('sends no lone surrogate, which the API refuses with a 400 at every try: half an emoji becomes U+FFFD, the rest is as it was', () => {
    const blocks = userContent([{ text: 'goal: \u{1F600} ok\n' }, { text: `output: ${'\u{1F600}'.slice(0, 1)} then \udc00 alone`, cache: true }]);
    expect(blocks.map((b) => b.text)).toEqual(['goal: \u{1F600} ok\n', 'output: \uFFFD then \uFFFD alone']);
    expect(blocks.every((b) => b.text.isWellFormed())).toBe(true);
  });

  it('keeps each step\'s cached blocks identical in the next step\'s prompt', () => {
    for (let n = 1; n < 8; n++) {
      const now = userContent(renderStepPrompt(stateAfter('r', n)));
      const next = userContent(renderStepPrompt(stateAfter('r', n + 1)));
      const cut = now.findIndex((b) => b.cache_control) + 1;
      expect(next.slice(0, cut).map((b) => b.text)).toEqual(now.slice(0, cut).map((b) => b.text));
      expect(next.findIndex((b) => b.cache_control)).toBe(cut);
    }
  });
});
