import type { Context } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { isTerminal } from '../../lib/core/state.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import fixtureAgent from './fixture-agent.ts';
import { pollOnce, type PollResult } from './lambda-harness.ts';

/** The deployed entry point itself, configured only through its environment. */

let resources: TestResources | undefined;
const saved = { ...process.env };

beforeEach(async () => {
  resources = await createTestResources('entry');
  Object.assign(process.env, {
    TABLE_NAME: resources.tableName, BUCKET_NAME: resources.bucketName, QUEUE_URL: resources.queueUrl,
    STEPWISE_LOG_LEVEL: 'silent', STEPWISE_CODE_VERSION: 'entry-test',
  });
  // No key: the worker must take the agent's offline model.
  delete process.env.ANTHROPIC_API_KEY;
  delete process.env.ANTHROPIC_API_KEY_SECRET_ID;
  delete process.env.STEPWISE_AGENT;
});

afterEach(() => {
  process.env = { ...saved };
  resources?.close();
  vi.resetModules();
});

async function loadHandler() {
  const { handler } = await import('../../functions/worker.ts');
  return { handler: (event: Parameters<typeof handler>[0], context: { awsRequestId: string }) => handler(event, context as Context), crashed: false };
}

describe('functions/worker.ts', () => {
  it('says what is missing without STEPWISE_AGENT, then wires itself once it is set and runs a run to the end', async () => {
    const worker = await loadHandler();
    await expect(worker.handler({ Records: [] }, { awsRequestId: 'cold' })).rejects.toThrow(/STEPWISE_AGENT/);

    process.env.STEPWISE_AGENT = 'test/aws/fixture-agent.ts';
    const runtime = resources!.runtime();
    const runId = await startTestRun(runtime, fixtureAgent, 'entry-run');
    const polls: PollResult[] = [];
    for (let i = 0; i < 20 && !isTerminal((await runtime.store.load(runId))!.status); i++) {
      polls.push(await pollOnce(resources!.clients, resources!.queueUrl, worker));
    }
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state).toMatchObject({ status: 'completed', summary: 'echoed twice' });
    expect(state.steps.map((s) => s.result.text)).toEqual(['echo 1', 'echo 2']);
    // The worker id of each step is the request id of the invocation that ran it.
    const requestIds = polls.filter((p) => p.records.length).map((p) => p.requestId);
    expect(state.steps.map((s) => s.workerId)).toEqual(requestIds.slice(0, 2));
    expect((await runtime.store.history(runId)).map((h) => h.codeVersion)).toEqual(['test', 'entry-test', 'entry-test', 'entry-test']);
    expect(await queueDepth(resources!.clients, resources!.queueUrl)).toBe(0);
  });

  it('refuses an agent without an offline model when no API key is configured', async () => {
    process.env.STEPWISE_AGENT = 'test/aws/fixture-agent-without-model.ts';
    const worker = await loadHandler();
    await expect(worker.handler({ Records: [] }, { awsRequestId: 'cold' })).rejects.toThrow(/no model for agent no-model/);
  });

  it('refuses a queue that is not FIFO, naming the setting', async () => {
    process.env.STEPWISE_AGENT = 'test/aws/fixture-agent.ts';
    process.env.QUEUE_URL = resources!.queueUrl.replace(/\.fifo$/, '');
    const worker = await loadHandler();
    await expect(worker.handler({ Records: [] }, { awsRequestId: 'cold' })).rejects.toThrow(/not a FIFO queue/);
  });
});
