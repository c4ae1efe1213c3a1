import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, toolSpecs } from '../../lib/agent.ts';
import { renderStepPrompt } from '../../lib/core/prompt.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { ModelKeyError } from '../../lib/core/errors.ts';
import { AnthropicModel } from '../../lib/llm/anthropic.ts';
import { KEY_REFRESH_MS, rememberKey, secretsManagerApiKey } from '../../lib/llm/api-key.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { completedStepLines, done, startMessagesServer, toolUse, type MessagesServer, type RecordedRequest, type Reply } from '../support/messages-server.ts';
import { newState } from '../support/states.ts';

function awsError(name: string): Error {
  return Object.assign(new Error(`${name} from the test`), { name });
}

describe('the model key is remembered for a while, not forever', () => {
  it('is read again after the refresh interval (5 minutes), and at once after invalidate()', async () => {
    let now = 0;
    const reads: string[] = [];
    const keys = ['sk-1', 'sk-2', 'sk-3'];
    const source = rememberKey(async () => { reads.push('read'); return keys[reads.length - 1]!; }, { now: () => now });
    expect(KEY_REFRESH_MS).toBe(5 * 60_000);
    expect(await Promise.all([source(), source()])).toEqual(['sk-1', 'sk-1']);
    now = KEY_REFRESH_MS - 1;
    expect(await source()).toBe('sk-1');
    now = KEY_REFRESH_MS;
    expect(await source()).toBe('sk-2');
    source.invalidate!();
    expect(await source()).toBe('sk-3');
    expect(reads).toHaveLength(3);
  });

  it('a failed refresh keeps the key that worked; after invalidate() a failed read fails', async () => {
    let now = 0;
    let fail = false;
    const source = rememberKey(async () => { if (fail) throw awsError('ThrottlingException'); return 'sk-good'; }, { now: () => now });
    expect(await source()).toBe('sk-good');
    fail = true;
    now = KEY_REFRESH_MS + 1;
    expect(await source()).toBe('sk-good');
    source.invalidate!();
    await expect(source()).rejects.toThrow(/ThrottlingException/);
  });

  it('a Secrets Manager key is refreshed every 5 minutes and re-read when invalidated', async () => {
    const sm = new SecretsManagerClient({ region: 'us-east-1' });
    const mock = mockClient(sm);
    mock.on(GetSecretValueCommand).resolvesOnce({ SecretString: 'sk-old' }).resolvesOnce({ SecretString: 'sk-new' }).resolves({ SecretString: 'sk-newer' });
    let now = 0;
    const source = secretsManagerApiKey('stepwise/rotating', sm, { now: () => now });
    expect(await source()).toBe('sk-old');
    now = 4 * 60_000;
    expect(await source()).toBe('sk-old');
    now = 5 * 60_000;
    expect(await source()).toBe('sk-new');
    source.invalidate!();
    expect(await source()).toBe('sk-newer');
    expect(mock.commandCalls(GetSecretValueCommand)).toHaveLength(3);
  });
});

describe('a refused key (401) through the SDK and the local Messages server', () => {
  let server: MessagesServer;
  const sm = new SecretsManagerClient({ region: 'us-east-1' });
  const secrets = mockClient(sm);
  beforeAll(async () => { server = await startMessagesServer({ apiKey: 'sk-new', minCacheableTokens: 0 }); });
  afterAll(() => server.stop());
  beforeEach(() => { server.reset(); secrets.reset(); });

  const request = () => ({ runId: 'k', step: 1, prompt: renderStepPrompt(newState('k')), tools: toolSpecs(rowsAgent(new FakeRows())), settings: {} });

  it('a secret holding a mangled key pauses the step, and the fixed secret is read at the next step, not after the refresh interval', async () => {
    secrets.on(GetSecretValueCommand).resolvesOnce({ SecretString: 'sk-new…' }).resolves({ SecretString: 'sk-new' });
    const model = new AnthropicModel({ baseURL: server.url, env: {}, apiKey: secretsManagerApiKey('stepwise/mangled', sm) });
    server.script(done('fixed'));
    await expect(model.decide(request())).rejects.toThrow(ModelKeyError);
    expect(server.requests).toHaveLength(0);
    expect(await model.decide(request())).toMatchObject({ kind: 'done', summary: 'fixed' });
    expect(secrets.commandCalls(GetSecretValueCommand)).toHaveLength(2);
  });

  it('a rotated key: the 401 makes the adapter read the secret again and the call is retried at once with the new key', async () => {
    secrets.on(GetSecretValueCommand).resolvesOnce({ SecretString: 'sk-old' }).resolves({ SecretString: 'sk-new' });
    const model = new AnthropicModel({ baseURL: server.url, env: {}, apiKey: secretsManagerApiKey('stepwise/rotated', sm) });
    server.script(done('first'), done('second'));
    expect(await model.decide(request())).toMatchObject({ kind: 'done', summary: 'first' });
    expect(await model.decide(request())).toMatchObject({ kind: 'done', summary: 'second' });
    expect(server.requests.map((r) => [r.headers.authorization, r.outcome])).toEqual([
      ['Bearer sk-old', 401], ['Bearer sk-new', 200], ['Bearer sk-new', 200],
    ]);
    expect(secrets.commandCalls(GetSecretValueCommand)).toHaveLength(2);
  });

  describe('in the engine', () => {
    let db: ReturnType<typeof tempDb>;
    afterEach(() => db.cleanup());

    it('pauses the run while the key is refused: nothing counted, the message back after 1 minute and more; then it completes', async () => {
      let key = 'sk-old';
      secrets.on(GetSecretValueCommand).callsFake(async () => ({ SecretString: key }));
      const attempts: number[] = [];
      const agent = defineAgent({
        name: 'keyed', tools: [tool({
          name: 'write_row', description: 'writes a row', input: z.object({ row: z.number() }), sideEffect: true,
          run: (_input, ctx) => { attempts.push(ctx.attempt); return 'ok'; },
        })],
      });
      server.otherwise((r: RecordedRequest): Reply => completedStepLines(r.userText).length < 1 ? toolUse('write_row', { row: 1 }) : done('one row'));
      db = tempDb();
      const clock = new ManualClock();
      const model = new AnthropicModel({ baseURL: server.url, env: {}, apiKey: secretsManagerApiKey('stepwise/paused', sm) });
      const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
      await start(deps);

      const delays: number[] = [];
      for (let delivery = 1; delivery <= 12; delivery++) {
        const [received] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
        expect(received!.receiveCount).toBe(delivery);
        const handled = await handleDelivery(deps, received!);
        expect(handled.action).toBe('release');
        if (handled.action !== 'release') throw new Error('unreachable');
        delays.push(handled.delayMs);
        await runtime.queue.release(received!, handled.delayMs);
        clock.advance(handled.delayMs);
      }
      expect(delays).toEqual([1, 2, 4, 8, 15, 15, 15, 15, 15, 15, 15, 15].map((m) => m * 60_000));
      // No checkpoint, no failure, no reason: the run is exactly as it was started.
      expect(await loadState(runtime)).toMatchObject({ status: 'running', step: 0, failures: 0 });
      expect((await runtime.store.history('run')).map((h) => h.version)).toEqual([1]);
      // Each paused delivery asked once with the refused key, after reading the secret again.
      expect(server.requests.every((r) => r.outcome === 401)).toBe(true);
      expect(server.requests).toHaveLength(12);

      key = 'sk-new';
      await drain(deps, runtime, clock);
      const state = await loadState(runtime);
      expect(state).toMatchObject({ status: 'completed', step: 1, failures: 0, summary: 'one row' });
      // Twelve pauses are not twelve tries: the tool sees its first attempt.
      expect(attempts).toEqual([1]);
      runtime.close();
    });
  });
});
