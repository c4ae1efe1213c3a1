import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { AnthropicModel } from '../../lib/llm/anthropic.ts';
import { completedStepLines, done, startMessagesServer, toolUse, type MessagesServer } from '../support/messages-server.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun } from './lambda-harness.ts';
import { FakeDatabase, writeRowsAgent } from './write-rows-agent.ts';

let server: MessagesServer;
let resources: TestResources | undefined;
beforeAll(async () => {
  server = await startMessagesServer();
  // Claude's side, decided from the prompt: one batch per step until four are done, then DONE.
  server.otherwise((request) => {
    const completed = completedStepLines(request.userText).length;
    return completed < 4 ? toolUse('write_row', { batch: completed + 1 }) : done('Wrote four batches.');
  });
});
afterAll(async () => { await server.stop(); });
afterEach(() => { resources?.close(); server.reset(); });

describe('the Lambda worker driven by Claude through the real SDK (local Messages API server)', () => {
  it('completes a run across a crash after a tool call, without asking the model for that step again', async () => {
    resources = await createTestResources('claude');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = () => new AnthropicModel({ apiKey: 'sk-test', baseURL: server.url, model: 'claude-opus-5-5' });
    const runId = await startTestRun(resources.runtime(), agent, 'claude-run');
    // Container 0 dies right after step 2's tool call (C4); container 1 takes over.
    await driveRun({
      resources, runId,
      spawn: (n) => new WorkerProcess({ resources: resources!, agent, model: model(), ...(n === 0 ? { crash: { point: 'C4', step: 2 } } : {}) }),
    });
    const state = decodeState((await resources.runtime().store.load(runId))!);
    expect(state).toMatchObject({ status: 'completed', step: 4, summary: 'Wrote four batches.' });
    // Four steps plus DONE: five requests, none repeated: step 2's decision was recorded before its tool ran.
    expect(server.requests.map((r) => completedStepLines(r.userText).length)).toEqual([0, 1, 2, 3, 4]);
    expect(db.receivedCount(`${runId}/step-2`)).toBe(2);
    expect(db.applied.get(`${runId}/step-2`)).toBe(1);
    // Usage and the answering model are recorded per step, and the totals match what the server billed.
    expect(state.steps.map((s) => s.model)).toEqual(Array(4).fill('claude-opus-5-5'));
    const billed = server.requests.reduce((n, r) => n + (r.usage?.input_tokens ?? 0) + (r.usage?.cache_read_input_tokens ?? 0) + (r.usage?.cache_creation_input_tokens ?? 0), 0);
    expect(state.usage.inputTokens + state.usage.cacheReadTokens + state.usage.cacheWriteTokens).toBe(billed);
  });
});
