import { afterEach, describe, expect, it } from 'vitest';
import { defineAgent, type ToolDefinition } from '../../lib/agent.ts';
import type { AwsRuntime } from '../../lib/aws/runtime.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { DeleteMessageCommand } from '@aws-sdk/client-sqs';
import { cancelRequest } from '../../lib/core/operate.ts';
import { cancelRun } from '../../lib/engine/operate/cancel.ts';
import type { OperateDeps } from '../../lib/engine/operate/deps.ts';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { silentLogger } from '../../lib/log.ts';
import { systemClock } from '../../lib/ports.ts';
import { gate } from '../support/gate.ts';
import { createTestResources, receiveAll, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/** Fork, cancel and retry through the Lambda handler, on DynamoDB Local and fauxqs. */

let resources: TestResources | undefined;
afterEach(() => resources?.close());

const operator = (runtime: AwsRuntime): OperateDeps => ({
  store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: systemClock, workerId: 'operator', codeVersion: 'test', log: silentLogger,
});

const load = async (runtime: AwsRuntime, runId: string) => decodeState((await runtime.store.load(runId))!);

describe('operating runs on AWS', () => {
  it('a fork from step k replays nothing before k, applies its effects under its own keys, and leaves the parent as it was', async () => {
    resources = await createTestResources('fork');
    const r = resources;
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const runtime = r.runtime();
    const parentId = await startTestRun(runtime, agent, 'parent');
    await driveRun({ resources: r, runId: parentId, spawn: () => new WorkerProcess({ resources: r, agent, model: new ScriptedModel({ steps: 4 }) }) });
    const parent = await load(runtime, parentId);
    expect(parent).toMatchObject({ status: 'completed', step: 4 });
    const parentStored = await runtime.store.load(parentId);
    const parentHistory = await runtime.store.history(parentId);

    const forked = await forkRun(operator(runtime), parentId, { fromStep: 2, runId: 'parent-f' });
    expect(forked).toMatchObject({ created: true, version: 1, forkedFrom: { runId: parentId, step: 2, version: parentStored!.version } });
    const model = new ScriptedModel({ steps: 4 });
    await driveRun({ resources: r, runId: 'parent-f', spawn: () => new WorkerProcess({ resources: r, agent, model }) });

    const fork = await load(runtime, 'parent-f');
    expect(fork).toMatchObject({ status: 'completed', step: 4, forkedFrom: { runId: parentId, step: 2 } });
    expect(fork.steps.slice(0, 2)).toEqual(parent.steps.slice(0, 2));
    expect(fork.steps.slice(2).map((s) => s.idempotencyKey)).toEqual(['parent-f/step-3', 'parent-f/step-4']);
    expect(model.calls).toEqual([3, 4, 5]);
    for (let n = 1; n <= 4; n++) expect(db.receivedCount(`${parentId}/step-${n}`)).toBe(1);
    expect(db.applied.get('parent-f/step-3')).toBe(1);
    expect(db.applied.get('parent-f/step-4')).toBe(1);
    expect(db.applied.has('parent-f/step-1')).toBe(false);
    expect(await runtime.store.load(parentId)).toEqual(parentStored);
    expect(await runtime.store.history(parentId)).toEqual(parentHistory);
  });

  it('a cancel racing a step held in its tool on another container: the step commits, no step after it starts', async () => {
    resources = await createTestResources('cancel');
    const r = resources;
    const db = new FakeDatabase();
    const held = gate();
    const base = writeRowsAgent(db);
    const slow = defineAgent({
      ...base,
      tools: base.tools.map((t): ToolDefinition => ({
        ...t, run: async (input, ctx) => { const out = await t.run(input, ctx); if (ctx.step === 2) await held.wait(); return out; },
      })),
    });
    const runtime = r.runtime();
    const runId = await startTestRun(runtime, base, 'cancel-run');
    const modelA = new ScriptedModel({ steps: 4 });
    const a = new WorkerProcess({ resources: r, agent: slow, model: modelA });
    await pollOnce(r.clients, r.queueUrl, a);
    const aPoll = pollOnce(r.clients, r.queueUrl, a, { visibilitySeconds: 60 });
    await held.reached;

    expect(await cancelRun(operator(runtime), runId, { by: 'ops@example.com', reason: 'stop' })).toMatchObject({ outcome: 'requested', version: 2 });
    // Another container meanwhile gets nothing: the run's message is in flight with A, and the cancel's
    // re-drive waits behind it in the run's group (it then finds the run moved on).
    const modelB = new ScriptedModel({ steps: 4 });
    const b = new WorkerProcess({ resources: r, agent: base, model: modelB });
    expect((await pollOnce(r.clients, r.queueUrl, b, { waitSeconds: 1 })).records).toEqual([]);
    held.open();
    expect((await aPoll).failures).toEqual([]);
    a.close(); b.close();

    await driveRun({ resources: r, runId, spawn: () => new WorkerProcess({ resources: r, agent: base, model: modelB }) });
    const state = await load(runtime, runId);
    expect(state).toMatchObject({ status: 'cancelled', step: 2, reason: expect.stringMatching(/^cancelled by ops@example\.com at .*: stop$/) });
    expect(db.received).toEqual([`${runId}/step-1`, `${runId}/step-2`]);
    expect(modelA.calls).toEqual([1, 2]);
    expect(modelB.calls).toEqual([]);
    expect((await runtime.store.history(runId)).map((h) => h.status)).toEqual(['running', 'running', 'running', 'cancelled']);
    expect((await runtime.store.load(runId))!.cancelRequested).toBeUndefined();
  });

  it('a repeated cancel redrives a run whose message is gone and whose first cancel wrote its request but never redrove it', async () => {
    resources = await createTestResources('cancel-again');
    const r = resources;
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const runtime = r.runtime();
    const runId = await startTestRun(runtime, agent, 'cancel-again');
    const model = new ScriptedModel({ steps: 4 });
    const worker = new WorkerProcess({ resources: r, agent, model });
    await pollOnce(r.clients, r.queueUrl, worker);
    // The run's message for version 2, sent by its first step seconds ago, is gone (taken and deleted with
    // no successor), and a cancel wrote its request, then its process was killed before redriving the run.
    for (const m of await receiveAll(r.clients, r.queueUrl)) await r.clients.sqs.send(new DeleteMessageCommand({ QueueUrl: r.queueUrl, ReceiptHandle: m.ReceiptHandle! }));
    const first = cancelRequest('ops@example.com', Date.now(), 'stop');
    await runtime.store.requestCancel(runId, 2, first);
    expect(await cancelRun(operator(runtime), runId, { by: 'someone-else' })).toEqual({ outcome: 'requested', runId, version: 2, request: first, earlier: true });
    // The repeated cancel's redrive gets past the deduplication of that lost send: the next delivery cancels.
    expect((await pollOnce(r.clients, r.queueUrl, worker)).failures).toEqual([]);
    worker.close();
    expect(await load(runtime, runId)).toMatchObject({ status: 'cancelled', step: 1, reason: expect.stringMatching(/^cancelled by ops@example\.com at .*: stop$/) });
    expect(model.calls).toEqual([1]);
  });

  it('retry continues a capped run on the Lambda path', async () => {
    resources = await createTestResources('retry');
    const r = resources;
    const db = new FakeDatabase();
    const base = writeRowsAgent(db);
    const agent = defineAgent({ ...base, settings: { ...base.settings, stepCap: 2 } });
    const runtime = r.runtime();
    const runId = await startTestRun(runtime, agent, 'retry-run');
    const model = new ScriptedModel({ steps: 4 });
    await driveRun({ resources: r, runId, spawn: () => new WorkerProcess({ resources: r, agent, model }) });
    expect(await load(runtime, runId)).toMatchObject({ status: 'capped', step: 2 });
    expect(await retryRun(operator(runtime), runId, {})).toMatchObject({ from: 'capped', stepCap: 12 });
    await driveRun({ resources: r, runId, spawn: () => new WorkerProcess({ resources: r, agent, model }) });
    expect(await load(runtime, runId)).toMatchObject({ status: 'completed', step: 4 });
    expect(db.rowCount).toBe(4);
  });
});
