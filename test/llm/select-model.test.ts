import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, toolSpecs } from '../../lib/agent.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { renderStepPrompt } from '../../lib/core/prompt.ts';
import { AnthropicModel, DEFAULT_MODEL } from '../../lib/llm/anthropic.ts';
import { selectModel } from '../../lib/llm/select-model.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { done, startMessagesServer, type MessagesServer } from '../support/messages-server.ts';
import { newState } from '../support/states.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const base = rowsAgent(new FakeRows());
const withOffline = defineAgent({ ...base, offlineModel: () => new StubModel(writeRowsScript(3)) });

describe('selectModel', () => {
  let server: MessagesServer;
  beforeAll(async () => { server = await startMessagesServer({ apiKey: 'sk-env' }); });
  afterAll(() => server.stop());

  it('uses Claude when ANTHROPIC_API_KEY is set, at ANTHROPIC_BASE_URL', async () => {
    const selected = selectModel(withOffline, { ANTHROPIC_API_KEY: 'sk-env', ANTHROPIC_BASE_URL: server.url });
    expect(selected.kind).toBe('anthropic');
    expect(selected.model).toBeInstanceOf(AnthropicModel);
    expect(selected.label).toContain(DEFAULT_MODEL);
    expect(selected.label).toContain(server.url);
    expect(selected.label).not.toContain('sk-env');
    server.script(done('reached the local server'));
    const reply = await selected.model.decide({ runId: 's', step: 1, prompt: renderStepPrompt(newState('s')), tools: toolSpecs(base), settings: {} });
    expect(reply).toMatchObject({ kind: 'done', summary: 'reached the local server' });
    expect(server.requests[0]!.headers.authorization).toBe('Bearer sk-env');
  });

  it('never prints credentials or query tokens of ANTHROPIC_BASE_URL in the label', () => {
    const selected = selectModel(withOffline, {
      ANTHROPIC_API_KEY: 'sk-env', ANTHROPIC_BASE_URL: 'https://gateway.example:8443/v1?token=tok-123&team=blue',
    });
    expect(selected.label).toContain('API at https://gateway.example:8443/v1?token=***&team=***');
    for (const secret of ['tok-123', 'blue']) expect(selected.label).not.toContain(secret);
    // One with user:password@ (which fetch will not send) or that is no URL is refused, not printed.
    for (const url of ['https://gw-user:s3cret-pass@gateway.example:8443/v1', 'gw-user:s3cret-pass@gateway']) {
      expect(() => selectModel(withOffline, { ANTHROPIC_API_KEY: 'k', ANTHROPIC_BASE_URL: url }), url).toThrow(/^ANTHROPIC_BASE_URL \(or baseURL\)/);
      expect(() => selectModel(withOffline, { ANTHROPIC_API_KEY: 'k', ANTHROPIC_BASE_URL: url }), url).not.toThrow(/s3cret-pass/);
    }
  });

  it('uses Claude when only a Secrets Manager secret id is set (read lazily, at the first step)', () => {
    const selected = selectModel(withOffline, { ANTHROPIC_API_KEY_SECRET_ID: 'stepwise/anthropic' });
    expect(selected.kind).toBe('anthropic');
    expect(selected.label).toContain('stepwise/anthropic');
  });

  it('names the agent\'s model, else STEPWISE_MODEL', () => {
    const pinned = defineAgent({ ...base, settings: { model: 'claude-sonnet-5-5' } });
    expect((selectModel(pinned, { ANTHROPIC_API_KEY: 'k', STEPWISE_MODEL: 'claude-haiku-5-5' }).model as AnthropicModel).defaultModel).toBe('claude-sonnet-5-5');
    expect((selectModel(base, { ANTHROPIC_API_KEY: 'k', STEPWISE_MODEL: 'claude-haiku-5-5' }).model as AnthropicModel).defaultModel).toBe('claude-haiku-5-5');
  });

  it('falls back to the agent\'s offline model, labelled as such', () => {
    const selected = selectModel(withOffline, {});
    expect(selected.kind).toBe('offline');
    expect(selected.model).toBeInstanceOf(StubModel);
    expect(selected.label).toMatch(/offline scripted model .* not Claude .*ANTHROPIC_API_KEY/);
  });

  it('says what to set when there is neither a key nor an offline model', () => {
    expect(() => selectModel(base, {})).toThrow(InvalidInputError);
    expect(() => selectModel(base, {})).toThrow(/ANTHROPIC_API_KEY.*offlineModel/);
  });
});
