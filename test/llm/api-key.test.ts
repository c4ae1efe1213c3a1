import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { toolSpecs } from '../../lib/agent.ts';
import { ModelKeyError, TransientError } from '../../lib/core/errors.ts';
import { renderStepPrompt } from '../../lib/core/prompt.ts';
import { AnthropicModel } from '../../lib/llm/anthropic.ts';
import { apiKeyFromEnv, keyFromSecret, secretsManagerApiKey } from '../../lib/llm/api-key.ts';
import { selectModel } from '../../lib/llm/select-model.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { done, startMessagesServer, type MessagesServer } from '../support/messages-server.ts';
import { newState } from '../support/states.ts';

function awsError(name: string): Error {
  return Object.assign(new Error(`${name} from the test`), { name });
}

describe('API key from Secrets Manager', () => {
  const sm = new SecretsManagerClient({ region: 'us-east-1' });
  const mock = mockClient(sm);
  beforeEach(() => mock.reset());

  it('reads the secret once for any number of callers', async () => {
    mock.on(GetSecretValueCommand, { SecretId: 'stepwise/anthropic' }).resolves({ SecretString: 'sk-ant-secret' });
    const source = secretsManagerApiKey('stepwise/anthropic', sm);
    expect(await Promise.all([source(), source(), source()])).toEqual(['sk-ant-secret', 'sk-ant-secret', 'sk-ant-secret']);
    expect(await source()).toBe('sk-ant-secret');
    expect(mock.commandCalls(GetSecretValueCommand)).toHaveLength(1);
  });

  it('a throttled read is transient and is not remembered: the next call reads again', async () => {
    mock.on(GetSecretValueCommand).rejectsOnce(awsError('ThrottlingException')).resolves({ SecretString: '{"ANTHROPIC_API_KEY":"sk-from-json"}' });
    const source = secretsManagerApiKey('stepwise/anthropic', sm);
    await expect(source()).rejects.toBeInstanceOf(TransientError);
    expect(await source()).toBe('sk-from-json');
    expect(mock.commandCalls(GetSecretValueCommand)).toHaveLength(2);
  });

  it('a missing secret or no permission pauses the work (ModelKeyError), with the secret id in the reason', async () => {
    mock.on(GetSecretValueCommand).rejects(awsError('ResourceNotFoundException'));
    await expect(secretsManagerApiKey('stepwise/nope', sm)()).rejects.toThrow(ModelKeyError);
    mock.on(GetSecretValueCommand).rejects(awsError('AccessDeniedException'));
    await expect(secretsManagerApiKey('stepwise/nope', sm)()).rejects.toThrow(/stepwise\/nope.*AccessDeniedException/);
  });

  it('accepts the plain key or JSON with a key field, and says what is wrong otherwise', () => {
    expect(keyFromSecret('  sk-plain\n', 's')).toBe('sk-plain');
    expect(keyFromSecret('{"apiKey":"sk-a"}', 's')).toBe('sk-a');
    expect(() => keyFromSecret('{"other":"x"}', 's')).toThrow(/ANTHROPIC_API_KEY/);
    expect(() => keyFromSecret('{broken', 's')).toThrow(ModelKeyError);
    expect(() => keyFromSecret(undefined, 's')).toThrow(/no string value/);
  });

  it('the environment picks the source: ANTHROPIC_API_KEY first, then the secret id, else none', async () => {
    expect(await apiKeyFromEnv({ ANTHROPIC_API_KEY: 'sk-env', ANTHROPIC_API_KEY_SECRET_ID: 'x' })!.source()).toBe('sk-env');
    expect(apiKeyFromEnv({ ANTHROPIC_API_KEY_SECRET_ID: 'stepwise/anthropic' })!.from).toContain('stepwise/anthropic');
    expect(apiKeyFromEnv({ ANTHROPIC_API_KEY: '  ' })).toBeUndefined();
  });
});

describe('the adapter reads its key once per process, not per step', () => {
  let server: MessagesServer;
  beforeAll(async () => { server = await startMessagesServer({ apiKey: 'sk-once' }); });
  afterAll(() => server.stop());

  it('three steps, one key read; a failed read is retried on the next step', async () => {
    let reads = 0;
    const model = new AnthropicModel({
      baseURL: server.url, env: {},
      apiKey: async () => {
        reads++;
        if (reads === 1) throw awsError('InternalServiceError');
        return 'sk-once';
      },
    });
    const request = { runId: 'k', step: 1, prompt: renderStepPrompt(newState('k')), tools: toolSpecs(rowsAgent(new FakeRows())), settings: {} };
    await expect(model.decide(request)).rejects.toBeInstanceOf(TransientError);
    server.script(done('1'), done('2'), done('3'));
    for (let i = 0; i < 3; i++) expect(await model.decide(request)).toMatchObject({ kind: 'done' });
    expect(reads).toBe(2);
    expect(server.requests.map((r) => r.headers.authorization)).toEqual(['Bearer sk-once', 'Bearer sk-once', 'Bearer sk-once']);
  });

  it('models selected again and again in one container (a Lambda per invocation) share one secret read', async () => {
    const everySecretsClient = mockClient(SecretsManagerClient);
    everySecretsClient.on(GetSecretValueCommand, { SecretId: 'stepwise/container-key' }).resolves({ SecretString: 'sk-once' });
    try {
      const env = { ANTHROPIC_API_KEY_SECRET_ID: 'stepwise/container-key', ANTHROPIC_BASE_URL: server.url };
      const agent = rowsAgent(new FakeRows());
      const request = { runId: 'c', step: 1, prompt: renderStepPrompt(newState('c')), tools: toolSpecs(agent), settings: {} };
      server.script(done('1'), done('2'), done('3'));
      for (let invocation = 0; invocation < 3; invocation++) {
        expect(await selectModel(agent, env).model.decide(request)).toMatchObject({ kind: 'done' });
      }
      expect(everySecretsClient.commandCalls(GetSecretValueCommand)).toHaveLength(1);
    } finally {
      everySecretsClient.restore();
    }
  });
});
