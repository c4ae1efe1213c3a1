import { QueryCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_INLINE_LIMIT } from '../../lib/agent.ts';
import { DYNAMODB_ITEM_LIMIT, itemSize } from '../../lib/aws/item-size.ts';
import { HEAD_SK, PK, SK, runPk, stepSk } from '../../lib/aws/table-layout.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { promptText } from '../../lib/core/prompt.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, filler, writeRowsAgent } from './write-rows-agent.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

async function rawItems(runId: string): Promise<Record<string, unknown>[]> {
  const page = await resources!.clients.doc.send(new QueryCommand({
    TableName: resources!.tableName, KeyConditionExpression: '#pk = :pk', ConsistentRead: true,
    ExpressionAttributeNames: { '#pk': PK }, ExpressionAttributeValues: { ':pk': runPk(runId) },
  }));
  return page.Items ?? [];
}

describe('large tool outputs and inputs on the AWS runtime', () => {
  it('stores a 1 MB tool output in S3, keeps the checkpoint small, and resumes with the output readable', async () => {
    resources = await createTestResources('one-mb');
    const db = new FakeDatabase();
    const outputBytes = 1024 * 1024;
    const agent = writeRowsAgent(db, { outputBytes: (step) => (step === 2 ? outputBytes : 0) });
    const model = new ScriptedModel({ steps: 3 });
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'one-mb-run');
    // The container dies right after step 2's checkpoint; a new one takes the run on from step 3.
    const { workers } = await driveRun({
      resources, runId,
      spawn: (n) => new WorkerProcess({ resources: resources!, agent, model, ...(n === 0 ? { crash: { point: 'C6', step: 2 } } : {}) }),
    });
    expect(workers).toHaveLength(2);

    const state = decodeState((await runtime.store.load(runId))!);
    expect(state.status).toBe('completed');
    const step2 = state.steps[1]!;
    const expected = `wrote row 2\n${filler(2, outputBytes)}`;
    expect(step2.result.bytes).toBe(Buffer.byteLength(expected));
    expect(step2.result.ref).toMatch(/^sha256:[0-9a-f]{64}$/);
    // Readable after the restart, byte for byte, from S3.
    expect((await runtime.blobs.get(step2.result.ref!))?.toString('utf8')).toBe(expected);
    // The resumed step's prompt carried the excerpt and the ref, not the megabyte.
    const step3Prompt = promptText(model.requests.find((r) => r.step === 3)!.prompt);
    expect(step3Prompt).toContain(step2.result.ref);
    expect(step3Prompt.length).toBeLessThan(20_000);

    const items = await rawItems(runId);
    const record = items.find((i) => i[SK] === stepSk(2))!;
    expect(itemSize(record)).toBeLessThan(8 * 1024);
    for (const item of items) expect(itemSize(item)).toBeLessThan(DYNAMODB_ITEM_LIMIT);
    expect(db.applied.get(idempotencyKey(runId, 2))).toBe(1);
  });

  it('spills inputs, outputs and summaries that would push an item toward 400 KB; DynamoDB never rejects a write', async () => {
    resources = await createTestResources('near-limit');
    const db = new FakeDatabase();
    // Outputs are kept inline by the engine (inline limit above them), so only the store stands between
    // these values and the 400 KB limit: 300 KB of input plus 250 KB of output in one step record.
    const agent = writeRowsAgent(db, { outputBytes: () => 250 * 1024, inlineLimit: MAX_INLINE_LIMIT });
    const payload = (step: number) => filler(step + 100, 300 * 1024);
    const summary = filler(999, 500 * 1024);
    const model = new ScriptedModel({ steps: 3, payload, summary });
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'near-limit-run');

    // Crash after step 2's tool call: the recorded decision (300 KB of input) sits in the head by reference.
    const first = new WorkerProcess({ resources, agent, model, crash: { point: 'C4', step: 2 } });
    try {
      for (let i = 0; i < 10 && !first.crashed; i++) await pollOnce(resources.clients, resources.queueUrl, first);
    } finally {
      first.close();
    }
    expect(first.crashed).toBe(true);
    const head = (await rawItems(runId)).find((i) => i[SK] === HEAD_SK)!;
    expect(head.pending).toBeUndefined();
    expect(head.pendingRef).toMatch(/^sha256:/);
    expect(itemSize(head)).toBeLessThan(DYNAMODB_ITEM_LIMIT / 2);
    expect(decodeState((await runtime.store.load(runId))!).pending?.input).toEqual({ batch: 2, payload: payload(2) });

    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }) });
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state.status).toBe('completed');
    expect(state.summary).toBe(summary);
    expect(state.steps.map((s) => (s.input as { payload: string }).payload.length)).toEqual([300 * 1024, 300 * 1024, 300 * 1024]);
    expect(state.steps.every((s) => s.result.bytes > 250 * 1024 && !s.result.ref)).toBe(true);

    const items = await rawItems(runId);
    for (const item of items) expect(itemSize(item)).toBeLessThan(DYNAMODB_ITEM_LIMIT / 2);
    for (let n = 1; n <= 3; n++) expect(items.find((i) => i[SK] === stepSk(n))!.recordRef).toMatch(/^sha256:/);
    expect(items.find((i) => i[SK] === HEAD_SK)!.headRef).toMatch(/^sha256:/);
    for (let n = 1; n <= 3; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
  });
});
