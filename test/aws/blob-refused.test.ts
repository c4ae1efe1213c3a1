import { DeleteBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { MAX_INLINE_LIMIT, defineAgent, tool } from '../../lib/agent.ts';
import { DynamoEventBuffer } from '../../lib/aws/dynamo-event-buffer.ts';
import { ensureBucket } from '../../lib/aws/provision.ts';
import { S3BlobStore } from '../../lib/aws/s3-blob-store.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { BlobRefusedError } from '../../lib/core/errors.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { blobRef } from '../../lib/core/result.ts';
import { requestApproval } from '../../lib/waits/tools.ts';
import { StubModel } from '../support/stub-model.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/**
 * S3 refusing a step's output (a 4xx: the bucket gone, access denied) is a failed try of the step that
 * names S3, not an escape: escaped, the message came back until the run failed as "its worker keeps
 * crashing", and only the logs said why.
 */
let resources: TestResources | undefined;
afterEach(() => resources?.close());

describe('a step output S3 refuses', () => {
  it('is a BlobRefusedError naming the bucket and S3\'s answer; no answer at all stays the error it was', async () => {
    resources = await createTestResources('blob-refused');
    const data = Buffer.from('x'.repeat(2_000));
    const missing = new S3BlobStore({ s3: resources.clients.s3, bucket: `${resources.bucketName}-gone` });
    const refused = await missing.put(blobRef(data), data).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(BlobRefusedError);
    expect((refused as Error).message).toMatch(new RegExp(`^S3 refused to store the step's output \\(2000 bytes, \\d+ gzipped\\) in bucket ${resources.bucketName}-gone: NoSuchBucket: `));

    // A spilled value is named as what it is, not as the step's output.
    const events = new DynamoEventBuffer({ doc: resources.clients.doc, tableName: resources.tableName, blobs: missing });
    const payload = await events.put({ id: 'e1', type: 'order.paid', key: 'o-1', payload: { note: 'z'.repeat(100_000) }, receivedAt: Date.now() }).catch((error: unknown) => error);
    expect(payload).toBeInstanceOf(BlobRefusedError);
    expect((payload as Error).message).toMatch(new RegExp(`^S3 refused to store the event's payload \\(\\d+ bytes, \\d+ gzipped\\) in bucket ${resources.bucketName}-gone: NoSuchBucket: `));

    // A port nothing listens on: an outage, which a later try may pass.
    const s3 = new S3Client({ endpoint: 'http://127.0.0.1:9', region: 'us-east-1', forcePathStyle: true, maxAttempts: 1, credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
    try {
      const unreachable = await new S3BlobStore({ s3, bucket: resources.bucketName }).put(blobRef(data), data).catch((error: unknown) => error);
      expect(unreachable).toBeInstanceOf(Error);
      expect(unreachable).not.toBeInstanceOf(BlobRefusedError);
    } finally {
      s3.destroy();
    }
  });

  it('fails the run at the step\'s third try with S3\'s reason; the step\'s effect is applied once, the model asked once', async () => {
    resources = await createTestResources('blob-gone');
    await resources.clients.s3.send(new DeleteBucketCommand({ Bucket: resources.bucketName }));
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db, { outputBytes: (step) => (step === 2 ? 50_000 : 0) });
    const model = new ScriptedModel({ steps: 3 });
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'blob-gone-run');
    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }), poll: { waitSeconds: 2 } });

    const state = decodeState((await runtime.store.load(runId))!);
    expect(state).toMatchObject({ status: 'failed', step: 1, failures: 3 });
    expect(state.reason).toMatch(new RegExp(`^step 2 failed 3 times; last error: S3 refused to store the step's output \\(\\d+ bytes, \\d+ gzipped\\) in bucket ${resources.bucketName}: NoSuchBucket`));
    // The recorded call was run again under its key, never chosen again: the effect once, the model once.
    expect(db.applied.get(idempotencyKey(runId, 2))).toBe(1);
    expect(model.callsFor(2)).toBe(1);
  });

  // Values too large for a DynamoDB item go to S3 too (the store spills them): refused there, the write
  // escaped, its message came back at every delivery (the model asked again at each, nothing having
  // recorded its call) until the run failed as a crashing worker, S3's answer only in the logs.
  // The reason names the value refused: each was "the step's output", whatever it was.
  const NAMED = { input: "the step's decision with its tool input", output: "the step's record with its tool input and output", summary: "the run's state with its goal, summary and wait" };
  for (const [what, big] of [['a tool input', 'input'], ['an output kept inline', 'output'], ['a DONE summary', 'summary']] as const) {
    it(`fails the run at the step's third try with S3's reason when ${what} over the item limit is refused`, async () => {
      resources = await createTestResources('spill-refused');
      await resources.clients.s3.send(new DeleteBucketCommand({ Bucket: resources.bucketName }));
      const db = new FakeDatabase();
      const agent = writeRowsAgent(db, big === 'output' ? { outputBytes: (step) => (step === 2 ? 100_000 : 0), inlineLimit: MAX_INLINE_LIMIT } : {});
      const model = new ScriptedModel({
        steps: big === 'summary' ? 1 : 3,
        payload: (step) => (big === 'input' && step === 2 ? 'x'.repeat(100_000) : undefined),
        ...(big === 'summary' ? { summary: 'y'.repeat(100_000) } : {}),
      });
      const runtime = resources.runtime();
      const runId = await startTestRun(runtime, agent, 'spill-refused-run');
      await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }), poll: { waitSeconds: 2 } });

      const state = decodeState((await runtime.store.load(runId))!);
      expect(state).toMatchObject({ status: 'failed', step: 1, failures: 3 });
      expect(state.reason).toMatch(new RegExp(`^step 2 failed 3 times; last error: S3 refused to store ${NAMED[big]} \\(\\d+ bytes, \\d+ gzipped\\) in bucket ${resources.bucketName}: NoSuchBucket`));
      if (big === 'summary') {
        // DONE could not be kept: each try asked the model again, three in all.
        expect(model.callsFor(2)).toBe(3);
      } else if (big === 'input') {
        // The call could not be kept, so it never ran; each try asked the model again, three in all.
        expect(db.applied.get(idempotencyKey(runId, 2))).toBeUndefined();
        expect(model.callsFor(2)).toBe(3);
      } else {
        expect(db.applied.get(idempotencyKey(runId, 2))).toBe(1);
        expect(model.callsFor(2)).toBe(1);
      }
    });
  }

  it('completes the key as null when S3 refuses an effect\'s result over the item limit: the effect applied once, the run failed with why', async () => {
    resources = await createTestResources('result-refused');
    await resources.clients.s3.send(new DeleteBucketCommand({ Bucket: resources.bucketName }));
    let applied = 0;
    const agent = defineAgent({
      name: 'exporter',
      tools: [tool({
        name: 'export_rows', description: 'Export rows.', input: z.object({}), sideEffect: true,
        // A short lease, so a try after a failed one would take the key over at once.
        run: async (_input, ctx) => (await ctx.once(async () => { applied++; return 'r'.repeat(100_000); }, { leaseMs: 1_000 })).length,
      })],
    });
    const model = new StubModel(() => ({ kind: 'tool', tool: 'export_rows', input: {} }));
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'result-refused-run');
    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }), poll: { waitSeconds: 2 } });

    const state = decodeState((await runtime.store.load(runId))!);
    // Was: left in progress, the key was taken over at each later try and the effect applied three times.
    expect(applied).toBe(1);
    expect(state.status).toBe('failed');
    expect(state.reason).toMatch(/the effect under result-refused-run\/step-1 ran, but its result \(100002 bytes, over what an item holds\) could not be kept: S3 refused to store the tool's result kept under its idempotency key .*NoSuchBucket.*kept as null and will not run again under this key/);
    expect(await runtime.ledger.once(idempotencyKey(runId, 1), {}, async () => 'again')).toBeNull();
  });

  // A wait is kept in the run's head, with its call's input (and an approval's request): over the item
  // limit it goes to S3 too. Refused there, it escaped the step, its message back at every delivery.
  const USAGE = { inputTokens: 100, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 0 };

  it('fails the run at the third try with S3\'s reason when a wait over the item limit is refused, each call counted once', async () => {
    resources = await createTestResources('wait-refused');
    await resources.clients.s3.send(new DeleteBucketCommand({ Bucket: resources.bucketName }));
    const agent = defineAgent({
      name: 'gated',
      tools: [tool({
        name: 'drop_table', description: 'Drop a table.', input: z.object({ table: z.string(), note: z.string() }), sideEffect: true,
        approval: { approvers: ['ops@example.com'] }, run: () => 'dropped',
      })],
    });
    const model = new StubModel(() => ({ kind: 'tool', tool: 'drop_table', input: { table: 'old_rows', note: 'n'.repeat(100_000) }, usage: USAGE }));
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'wait-refused-run');
    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }), poll: { waitSeconds: 2 } });

    const state = decodeState((await runtime.store.load(runId))!);
    expect(state).toMatchObject({ status: 'failed', step: 0, failures: 3 });
    expect(state.reason).toMatch(new RegExp(`^step 1 failed 3 times; last error: S3 refused to store the run's state with its goal, summary and wait \\(\\d+ bytes, \\d+ gzipped\\) in bucket ${resources.bucketName}: NoSuchBucket`));
    // Nothing kept the call: each try asked the model again, and each call is counted once.
    expect(model.requests).toHaveLength(3);
    expect(state.usage).toMatchObject({ inputTokens: 300, outputTokens: 60 });
  });

  it('counts a recorded call once when its wait, refused at one try, is kept at the next', async () => {
    resources = await createTestResources('wait-refused-once');
    const db = new FakeDatabase();
    // A side effect, then a wait for a person: the call is recorded before it runs (small, kept in the item),
    // and the wait's request is over the item limit (here 5,000 bytes), kept in S3.
    const agent = defineAgent({
      name: 'ship-then-ask',
      tools: [tool({
        name: 'ship', description: 'Ship the order, then ask to bill it.', input: z.object({ order: z.string() }), sideEffect: true,
        run: async ({ order }, ctx) => {
          await ctx.once(() => db.apply(ctx.idempotencyKey, 1));
          return requestApproval({ approvers: ['ops@example.com'] }).run({ request: `Bill order ${order}?`, details: 'd'.repeat(7_000) }, ctx);
        },
      })],
    });
    const model = new StubModel(() => ({ kind: 'tool', tool: 'ship', input: { order: 'o-7' }, usage: USAGE }));
    const runtime = resources.runtime({ spillBytes: 5_000 });
    const runId = await startTestRun(runtime, agent, 'wait-refused-once-run');
    await resources.clients.s3.send(new DeleteBucketCommand({ Bucket: resources.bucketName }));
    const worker = new WorkerProcess({ resources, agent, model, spillBytes: 5_000 });
    try {
      await pollOnce(resources.clients, resources.queueUrl, worker, { waitSeconds: 2 });
      const failed = decodeState((await runtime.store.load(runId))!);
      expect(failed).toMatchObject({ status: 'running', failures: 1, usage: { inputTokens: 100, outputTokens: 20 } });
      expect(failed.lastError).toMatch(/^S3 refused to store the run's state with its goal, summary and wait /);

      // The bucket back: the next try runs the recorded call again under its key and the run waits. Its
      // call was counted by the failed try, and is not counted again.
      await ensureBucket(resources.clients.s3, resources.bucketName);
      for (let i = 0; i < 10 && decodeState((await runtime.store.load(runId))!).status !== 'waiting'; i++) {
        await pollOnce(resources.clients, resources.queueUrl, worker, { waitSeconds: 2 });
      }
    } finally {
      worker.close();
    }
    const waiting = decodeState((await runtime.store.load(runId))!);
    expect(waiting).toMatchObject({ status: 'waiting', failures: 0, usage: { inputTokens: 100, outputTokens: 20 } });
    expect(waiting.wait?.request).toMatch(/^Bill order o-7\?/);
    expect(model.requests).toHaveLength(1);
    expect(db.applied.get(idempotencyKey(runId, 1))).toBe(1);
  });
});

