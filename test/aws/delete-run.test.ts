import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { BatchWriteCommand, QueryCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sweepBlobs } from '../../lib/aws/blob-sweep.ts';
import { DynamoCheckpointStore } from '../../lib/aws/dynamo-checkpoint-store.ts';
import { DynamoLedger } from '../../lib/aws/dynamo-ledger.ts';
import { DELETED_ATTRIBUTE, FREE_AT_ATTRIBUTE, ID_REUSE_AFTER_MS, PK, SK, TTL_ATTRIBUTE, runPk } from '../../lib/aws/table-layout.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { PermanentError, RunIdInUseError } from '../../lib/core/errors.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { blobRef } from '../../lib/core/result.ts';
import { completeStep, recordFailure } from '../../lib/core/transitions.ts';
import { deleteRun } from '../../lib/engine/operate/delete.ts';
import type { OperateDeps } from '../../lib/engine/operate/deps.ts';
import { silentLogger } from '../../lib/log.ts';
import type { CheckpointStore, IdempotencyLedger } from '../../lib/ports.ts';
import { META, newState, recordFor } from '../support/states.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

let resources: TestResources;
beforeAll(async () => { resources = await createTestResources('delete'); });
afterAll(() => resources?.close());

const DAY = 86_400_000;
let counter = 0;

/** A failed run of `steps` steps, each with an effect applied under its key; step 2's output a blob in the bucket. */
async function failedRun(store: CheckpointStore, ledger: IdempotencyLedger, steps: number) {
  const runId = `delete-${process.pid}-${counter++}`;
  await store.create(newState(runId), META);
  let state = newState(runId);
  let version = 1;
  for (let n = 1; n <= steps; n++) {
    const output = Buffer.from(`${'large output '.repeat(600)} of ${runId}`);
    const record = n === 2 ? { ...recordFor(runId, n), result: { ok: true, text: 'large output (excerpt)', bytes: output.length, ref: blobRef(output) } } : recordFor(runId, n);
    if (n === 2) await resources.runtime().blobs.put(blobRef(output), output);
    state = completeStep(state, record, 3_000 + n);
    version = (await store.commit({ runId, expectedVersion: version, state, appended: record, ...META })).version;
    await ledger.once(idempotencyKey(runId, n), { n }, () => ({ applied: n }));
  }
  version = (await store.commit({ runId, expectedVersion: version, state: recordFailure(state, new PermanentError('boom'), 9_000), ...META })).version;
  return { runId, version };
}

async function partition(runId: string): Promise<Record<string, unknown>[]> {
  const page = await resources.clients.doc.send(new QueryCommand({
    TableName: resources.tableName, KeyConditionExpression: '#pk = :pk', ExpressionAttributeNames: { '#pk': PK }, ExpressionAttributeValues: { ':pk': runPk(runId) }, ConsistentRead: true,
  }));
  return page.Items ?? [];
}

/** The table's client, with `fault` standing in for BatchWriteItem calls it takes. */
function withBatchFault(fault: (command: BatchWriteCommand, real: DynamoDBDocumentClient) => Promise<unknown> | undefined): DynamoDBDocumentClient {
  const real = resources.clients.doc;
  return { send: (command: unknown) => (command instanceof BatchWriteCommand ? fault(command, real) : undefined) ?? real.send(command as never) } as unknown as DynamoDBDocumentClient;
}

describe('deleting a run on DynamoDB', () => {
  it('a delete killed after marking the head leaves no run to read or create; the next delete finishes it', async () => {
    const runtime = resources.runtime();
    const { runId, version } = await failedRun(runtime.store, runtime.ledger, 3);
    let thrown = false;
    const faulty = new DynamoCheckpointStore({
      doc: withBatchFault(() => { if (thrown) return undefined; thrown = true; return Promise.reject(new Error('connection reset (injected)')); }),
      tableName: resources.tableName, blobs: runtime.blobs,
    });
    await expect(faulty.deleteRun(runId, version)).rejects.toThrow('connection reset (injected)');
    // Marked: nothing reads it as a run, and its id cannot be created again while its rows are there.
    expect((await partition(runId)).length).toBeGreaterThan(5);
    expect(await runtime.store.load(runId)).toBeUndefined();
    expect(await runtime.store.history(runId)).toEqual([]);
    expect((await runtime.store.list({ status: 'failed', limit: 1000 })).map((r) => r.runId)).not.toContain(runId);
    await expect(runtime.store.create(newState(runId), META)).rejects.toThrow(RunIdInUseError);
    await expect(runtime.store.create(newState(runId), META)).rejects.toThrow(`finish it with stepwise delete ${runId}`);
    // A retry that read the run before the mark loses its fence.
    await expect(runtime.store.commit({ runId, expectedVersion: version, state: { ...newState(runId), step: 3 }, ...META })).rejects.toThrow(/stale write/);

    // `stepwise delete` again: no run to load, an interrupted delete to finish.
    const deps = { store: runtime.store, log: silentLogger } as unknown as OperateDeps;
    expect(await deleteRun(deps, runId)).toEqual({ outcome: 'finished', runId });
    // All that is left is a mark with no data of the run, while SQS's deduplication window lasts.
    expect((await partition(runId)).map((item) => Object.keys(item).sort())).toEqual([[DELETED_ATTRIBUTE, FREE_AT_ATTRIBUTE, PK, SK, TTL_ATTRIBUTE].sort()]);
    await expect(deleteRun(deps, runId)).rejects.toThrow(`unknown run: ${runId}`);
    // Was: the id was free at once, and each of a new run's messages SQS dropped as a duplicate of the old
    // run's (run and version) waited for the sweeper's re-drive, 15 minutes.
    await expect(runtime.store.create(newState(runId, 'again'), META)).rejects.toThrow(/SQS would drop a new run's messages as that run's until \S+Z/);
    // Past the window, the id is free, the mark goes with the create, and its effects run again.
    const later = new DynamoCheckpointStore({ doc: resources.clients.doc, tableName: resources.tableName, blobs: runtime.blobs, clock: { now: () => Date.now() + ID_REUSE_AFTER_MS } });
    expect(await later.create(newState(runId, 'again'), META)).toMatchObject({ created: true, version: 1 });
    expect(decodeState((await runtime.store.load(runId))!)).toMatchObject({ goal: 'again', steps: [] });
    for (const n of [1, 2, 3]) expect(await runtime.ledger.once(idempotencyKey(runId, n), { n: 'new' }, () => 'ran again')).toBe('ran again');
  });

  it('a run whose last step is older than SQS\'s deduplication window leaves only its mark, for the ledger: its id is free at once, and an effect that finishes late writes nothing back', async () => {
    const runtime = resources.runtime();
    const { runId, version } = await failedRun(runtime.store, runtime.ledger, 2);
    // The failed step 3's effect goes on in a process that froze: its lease ran out long ago.
    const key = idempotencyKey(runId, 3);
    let finish!: (value: string) => void;
    let started!: () => void;
    const entered = new Promise<void>((resolve) => { started = resolve; });
    const frozen = resources.runtime({ clock: { now: () => Date.now() - 10 * 60_000 } }).ledger;
    const late = frozen.once(key, { n: 3 }, () => { started(); return new Promise<string>((resolve) => { finish = resolve; }); });
    await entered;
    const later = new DynamoCheckpointStore({ doc: resources.clients.doc, tableName: resources.tableName, blobs: runtime.blobs, clock: { now: () => Date.now() + ID_REUSE_AFTER_MS } });
    expect(await later.deleteRun(runId, version)).toBe(true);
    // No data of the run: a mark whose id is free already, gone by its TTL.
    const [mark, ...rest] = await partition(runId);
    expect(rest).toEqual([]);
    expect(Object.keys(mark!).sort()).toEqual([DELETED_ATTRIBUTE, FREE_AT_ATTRIBUTE, PK, SK, TTL_ATTRIBUTE].sort());
    expect(Number(mark![FREE_AT_ATTRIBUTE])).toBeLessThanOrEqual(Date.now() + ID_REUSE_AFTER_MS);
    // The frozen holder comes back: the mark says its run is gone, and its result is not written back.
    finish('old 3');
    expect(await late).toBe('old 3');
    expect(await later.create(newState(runId, 'again'), META)).toMatchObject({ created: true, version: 1 });
    expect(await runtime.ledger.once(key, { n: 3 }, () => 'new 3')).toBe('new 3');
  });

  it('sends again what BatchWriteItem leaves unprocessed', async () => {
    const runtime = resources.runtime();
    const { runId, version } = await failedRun(runtime.store, runtime.ledger, 4);
    let calls = 0;
    let unprocessed = 0;
    const throttled = new DynamoCheckpointStore({
      // The first call: DynamoDB takes one delete and hands the rest back, as under throttling.
      doc: withBatchFault(async (command, real) => {
        calls++;
        if (calls > 1) return real.send(command);
        const [first, ...rest] = command.input.RequestItems![resources.tableName]!;
        await real.send(new BatchWriteCommand({ RequestItems: { [resources.tableName]: [first!] } }));
        unprocessed = rest.length;
        return { UnprocessedItems: { [resources.tableName]: rest } };
      }),
      tableName: resources.tableName, blobs: runtime.blobs,
    });
    expect(await throttled.deleteRun(runId, version)).toBe(true);
    expect(unprocessed).toBeGreaterThan(5);
    expect(calls).toBe(2);
    // Every item but the mark that holds the id while SQS's deduplication window lasts.
    expect((await partition(runId)).map((item) => item[SK])).toEqual(['h']);
    expect(await new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs: runtime.blobs }).once(idempotencyKey(runId, 4), {}, () => 'ran again')).toBe('ran again');
  });

  it('leaves the run\'s blobs to the sweep, which then deletes them: nothing refers to them any more', async () => {
    // Heads and records past 200 bytes spilled to the bucket too.
    const runtime = resources.runtime({ spillBytes: 200 });
    const { runId, version } = await failedRun(runtime.store, runtime.ledger, 3);
    const objects = async () => (await resources.clients.s3.send(new ListObjectsV2Command({ Bucket: resources.bucketName }))).Contents?.length ?? 0;
    // S3 stamps objects with its own time: judged as if two days had passed since.
    const sweep = () => sweepBlobs({ doc: resources.clients.doc, s3: resources.clients.s3, tableName: resources.tableName, bucketName: resources.bucketName, blobs: runtime.blobs, now: Date.now() + 2 * DAY });
    await sweep();
    const before = await objects();
    expect(before).toBeGreaterThan(3);
    expect((await sweep()).deleted).toBe(0);
    expect(await runtime.store.deleteRun(runId, version)).toBe(true);
    const swept = await sweep();
    expect(swept.deleted).toBe(before - swept.referenced);
    expect(swept.deleted).toBeGreaterThan(3);
    expect(await objects()).toBe(swept.referenced);
  });
});
