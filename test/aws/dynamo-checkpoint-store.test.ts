import { DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { GetCommand, PutCommand, QueryCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../lib/aws/clients.ts';
import { DynamoCheckpointStore } from '../../lib/aws/dynamo-checkpoint-store.ts';
import { DYNAMODB_ITEM_LIMIT, itemSize } from '../../lib/aws/item-size.ts';
import { HEAD_SK, PK, SK, STATUS_INDEX, TTL_ATTRIBUTE, checkpointSk, runPk, stepSk, summarySk } from '../../lib/aws/table-layout.ts';
import { decodeState, encodeStep, encodeSummary } from '../../lib/core/codec.ts';
import { condensedBlocks } from '../../lib/core/condense.ts';
import { condensedBlock } from '../../lib/core/condensed.ts';
import { blobRef } from '../../lib/core/result.ts';
import { complete, completeStep } from '../../lib/core/transitions.ts';
import { checkpointStoreContract } from '../contract/checkpoint-store-contract.ts';
import { eventBufferContract } from '../contract/event-buffer-contract.ts';
import { DynamoEventBuffer } from '../../lib/aws/dynamo-event-buffer.ts';
import type { CheckpointStore } from '../../lib/ports.ts';
import { META, decisionFor, newState, recordFor, stateAfter } from '../support/states.ts';
import { countCommands, countReadUnits, createTestResources, type TestResources } from './aws-fixtures.ts';

let resources: TestResources;
let store: DynamoCheckpointStore;
beforeAll(async () => {
  resources = await createTestResources('store');
  store = resources.runtime().store;
});
afterAll(() => resources?.close());

checkpointStoreContract('DynamoDB Local', () => ({
  store,
  ledger: resources.runtime().ledger,
  ledgerBehind: (ms) => resources.runtime({ clock: { now: () => Date.now() - ms } }).ledger,
  storeAt: (clock) => resources.runtime({ clock }).store,
  corruptLatestHead: async (runId) => {
    await resources.clients.doc.send(new UpdateCommand({
      TableName: resources.tableName, Key: { [PK]: runPk(runId), [SK]: HEAD_SK },
      UpdateExpression: 'SET head = :bad', ExpressionAttributeValues: { ':bad': '{not json' },
    }));
  },
}));

let eventNow = 0;
eventBufferContract('DynamoDB Local', () => ({
  events: new DynamoEventBuffer({ doc: resources.clients.doc, tableName: resources.tableName, blobs: resources.runtime().blobs, clock: { now: () => eventNow } }),
  setNow: (ms) => { eventNow = ms; },
}));

async function rawItems(runId: string): Promise<Record<string, unknown>[]> {
  const page = await resources.clients.doc.send(new QueryCommand({
    TableName: resources.tableName, KeyConditionExpression: '#pk = :pk',
    ExpressionAttributeNames: { '#pk': PK }, ExpressionAttributeValues: { ':pk': runPk(runId) }, ConsistentRead: true,
  }));
  return page.Items ?? [];
}

async function commitSteps(target: DynamoCheckpointStore, runId: string, steps: number): Promise<number> {
  await target.create(newState(runId), META);
  let version = 1;
  for (let n = 1; n <= steps; n++) {
    version = (await target.commit({ runId, expectedVersion: version, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META })).version;
  }
  return version;
}

describe('DynamoDB checkpoint store: calls and items', () => {
  it('loads with one Query, records a decision with one UpdateItem and commits with one TransactWriteItems', async () => {
    const runId = 'calls-run';
    await commitSteps(store, runId, 3);
    const counts = countCommands(resources.clients.dynamo);
    const loaded = await store.load(runId);
    expect(Object.fromEntries(counts)).toEqual({ QueryCommand: 1 });
    counts.clear();
    await store.recordDecision(runId, 4, decisionFor(runId, 4));
    expect(Object.fromEntries(counts)).toEqual({ UpdateItemCommand: 1 });
    counts.clear();
    const state = decodeState(loaded!);
    await store.commit({ runId, expectedVersion: 4, state: completeStep(state, recordFor(runId, 4), 9_000), appended: recordFor(runId, 4), ...META });
    expect(Object.fromEntries(counts)).toEqual({ TransactWriteItemsCommand: 1 });
  });

  it('refuses queue work or a blob it cannot carry (SQS and S3 are beside the table), writing nothing', async () => {
    const runId = 'refuses-run';
    await commitSteps(store, runId, 1);
    const before = await rawItems(runId);
    const write = { runId, expectedVersion: 2, state: stateAfter(runId, 2), appended: recordFor(runId, 2), ...META };
    const port: CheckpointStore = store;
    expect(port.carriesQueueWork).toBeFalsy();
    expect(port.carriesBlobs).toBeFalsy();
    await expect(store.commit({ ...write, queue: { send: { message: { runId, version: 3 } } } })).rejects.toThrow(/cannot carry queue work or blobs/);
    await expect(store.commit({ ...write, blobs: [{ ref: 'sha256:x', data: Buffer.from('x') }] })).rejects.toThrow(/cannot carry queue work or blobs/);
    expect(await rawItems(runId)).toEqual(before);
    expect((await store.commit(write)).version).toBe(3);
    // A start's create the same: its first message goes to SQS after it, so the create says so rather than drop it.
    const fresh = 'refuses-create-run';
    await expect(store.create(newState(fresh), { ...META, queue: { send: { message: { runId: fresh, version: 1 } } } })).rejects.toThrow(/cannot carry queue work: send it to SQS/);
    expect(await store.load(fresh)).toBeUndefined();
  });

  it('keeps one head, one record per step and one history row per version; only history rows carry a TTL', async () => {
    const runId = 'layout-run';
    await commitSteps(store, runId, 3);
    const items = await rawItems(runId);
    const keys = items.map((i) => i[SK]);
    expect(keys).toEqual([checkpointSk(1), checkpointSk(2), checkpointSk(3), checkpointSk(4), HEAD_SK, stepSk(1), stepSk(2), stepSk(3)]);
    for (const item of items) {
      if (String(item[SK]).startsWith('c#')) expect(item[TTL_ATTRIBUTE]).toBeTypeOf('number');
      else expect(item[TTL_ATTRIBUTE]).toBeUndefined();
    }
    const ttl = await resources.clients.dynamo.send(new DescribeTimeToLiveCommand({ TableName: resources.tableName }));
    expect(ttl.TimeToLiveDescription).toMatchObject({ AttributeName: TTL_ATTRIBUTE, TimeToLiveStatus: 'ENABLED' });
  });

  it('writes items whose size does not depend on how long the run is', async () => {
    const runId = 'size-run';
    await commitSteps(store, runId, 30);
    const items = await rawItems(runId);
    const size = (sk: string) => itemSize(items.find((i) => i[SK] === sk)!);
    // The only difference is the digits of counters and sizes; a write carrying the history would be 30x.
    expect(Math.abs(size(stepSk(30)) - size(stepSk(1)))).toBeLessThan(16);
    expect(Math.abs(size(checkpointSk(31)) - size(checkpointSk(2)))).toBeLessThan(32);
    expect(size(HEAD_SK)).toBeLessThan(2 * size(checkpointSk(2)));
  });

  it('keeps history for the retention window, then shows only the latest, which never expires', async () => {
    let now = 1_000_000_000_000;
    const clocked = resources.runtime({ clock: { now: () => now }, retentionMs: 60_000 }).store;
    const runId = 'retention-run';
    await clocked.create(newState(runId), META);
    for (let n = 1; n <= 3; n++) {
      now += 1000;
      await clocked.commit({ runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
    }
    expect((await clocked.history(runId)).map((h) => h.version)).toEqual([1, 2, 3, 4]);
    now += 60_001 - 2000; // versions 1 and 2 are past the window, 3 is not, 4 is the latest
    expect((await clocked.history(runId)).map((h) => h.version)).toEqual([3, 4]);
    // A page skips the expired rows it reads rather than counting them: below 4 only 3 is left.
    expect((await clocked.history(runId, { before: 4, limit: 2 })).map((h) => h.version)).toEqual([3]);
    expect((await clocked.history(runId, { before: 3, limit: 1 })).map((h) => h.version)).toEqual([]);
    now += 10 * 60_000; // every history row has expired, including the latest's own row
    const history = await clocked.history(runId);
    expect(history.map((h) => h.version)).toEqual([4]);
    expect(history[0]).toMatchObject({ step: 3, tool: 'write_row', idempotencyKey: `${runId}/step-3`, status: 'running' });
    // The latest checkpoint still resumes the run with every step.
    expect(decodeState((await clocked.load(runId))!).steps.map((s) => s.step)).toEqual([1, 2, 3]);
  });

  it('lists runs by status across the index shards, newest first, with a limit', async () => {
    let now = 2_000_000_000_000;
    const clocked = resources.runtime({ clock: { now: () => now } }).store;
    const ids = Array.from({ length: 12 }, (_, i) => `shard-run-${i}`);
    for (const runId of ids) {
      now += 10;
      await clocked.create(newState(runId), META);
    }
    const state = decodeState((await clocked.load(ids[3]!))!);
    now += 10;
    await clocked.commit({ runId: ids[3]!, expectedVersion: 1, state: complete(state, 'done', undefined, now), ...META });
    const running = (await clocked.list({ status: 'running', limit: 1000 })).filter((r) => r.runId.startsWith('shard-run-'));
    expect(running.map((r) => r.runId)).toEqual(ids.filter((_, i) => i !== 3).reverse());
    const newest = await clocked.list({ status: 'running', limit: 2 });
    expect(newest.map((r) => r.runId)).toEqual([ids[11], ids[10]]);
    const stalled = await clocked.list({ status: 'running', updatedBefore: 2_000_000_000_000 + 25, limit: 1000 });
    expect(stalled.map((r) => r.runId).filter((id) => id.startsWith('shard-run-'))).toEqual([ids[1], ids[0]]);
    const all = await clocked.list({ limit: 1000 });
    expect(all.find((r) => r.runId === ids[3])).toMatchObject({ status: 'completed', version: 2 });
  });

  it('lists a long reason cut where it does not split an emoji, the head keeping it whole', async () => {
    const runId = 'emoji-reason';
    await store.create(newState(runId), META);
    // The 1,000th UTF-16 unit is the first half of an emoji: a cut there left a lone surrogate.
    const reason = `${'x'.repeat(999)}😀 and the rest`;
    const state = decodeState((await store.load(runId))!);
    await store.commit({ runId, expectedVersion: 1, state: { ...state, status: 'failed', reason, updatedAt: state.updatedAt + 1 }, ...META });
    const listed = (await store.list({ status: 'failed', limit: 1000 })).find((r) => r.runId === runId)!;
    expect(listed.reason!.isWellFormed()).toBe(true);
    expect(listed.reason).toBe(`${'x'.repeat(999)}…`);
    expect(decodeState((await store.load(runId))!).reason).toBe(reason);
  });
});

describe('DynamoDB checkpoint store: pages of runs updated in one millisecond', () => {
  it('reads the rest of a full page\'s last millisecond, whatever order the index gives ties in', async () => {
    // The index sorts by update time alone: DynamoDB returns runs of one millisecond in no set order
    // (DynamoDB Local happens to give them by key). This client hands them back the other way round, which
    // a server cannot be made to do: without the read of the rest of the millisecond, a page would keep a
    // later run id and leave out an earlier one, and the next page would skip it.
    const doc = resources.clients.doc;
    const reversedTies = {
      send: async (command: unknown) => {
        const out = await doc.send(command as never) as { Items?: Record<string, unknown>[] };
        const input = (command as { input?: { IndexName?: string } }).input;
        if (command instanceof QueryCommand && input?.IndexName === STATUS_INDEX && out.Items) {
          out.Items = [...out.Items].sort((a, b) => Number(b.updatedAt) - Number(a.updatedAt) || String(a.runId).localeCompare(String(b.runId)));
        }
        return out;
      },
    } as unknown as typeof doc;
    const now = 500;
    const tied = new DynamoCheckpointStore({ doc: reversedTies, tableName: resources.tableName, blobs: resources.runtime().blobs, clock: { now: () => now } });
    const ids = Array.from({ length: 12 }, (_, i) => `tie-${String(i).padStart(2, '0')}`);
    for (const runId of ids) await tied.create(newState(runId), META);
    const paged: string[] = [];
    let after: { updatedAt: number; runId: string } | undefined;
    for (let pages = 0; pages < 100; pages++) {
      const page = (await tied.list({ status: 'running', limit: 2, ...(after ? { after } : {}) }));
      paged.push(...page.map((r) => r.runId));
      if (page.length < 2) break;
      after = { updatedAt: page[1]!.updatedAt, runId: page[1]!.runId };
    }
    expect(paged.filter((id) => id.startsWith('tie-'))).toEqual([...ids].reverse());
  });
});

describe('DynamoDB checkpoint store: the resume read', () => {
  it('reads no more capacity for a warm resume at step 600 than at step 2, and only the missing records when behind', async () => {
    const runId = 'resume-read-run';
    const reads = countReadUnits(resources.clients.dynamo);
    await store.create(newState(runId), META);
    let version = 1;
    const commitThrough = async (last: number) => {
      for (let n = version; n <= last; n++) {
        version = (await store.commit({ runId, expectedVersion: version, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META })).version;
      }
    };
    const unitsOf = async (load: () => Promise<unknown>) => {
      reads.units = 0;
      await load();
      return reads.units;
    };

    await commitThrough(1);
    // Step 2: a cold worker reads the head and record 1; a warm one, which holds record 1, reads the head.
    const coldAt2 = await unitsOf(() => store.load(runId));
    const warmAt2 = await unitsOf(() => store.load(runId, { afterStep: 1 }));
    await commitThrough(599);
    const warmAt600 = await unitsOf(() => store.load(runId, { afterStep: 599 }));
    const behindAt600 = await unitsOf(() => store.load(runId, { afterStep: 598 }));
    const coldAt600 = await unitsOf(() => store.load(runId));

    expect(warmAt2).toBeGreaterThan(0);
    expect(warmAt600).toBeLessThanOrEqual(warmAt2);
    // A worker one step behind (another worker did step 599) reads the head and one record, however long
    // the run: at most what a cold worker reads at step 2 plus the head again.
    expect(behindAt600).toBeLessThanOrEqual(coldAt2 + warmAt2);
    // The cold read is the one that grows: it is what the warm reads no longer pay.
    expect(coldAt600).toBeGreaterThan(10 * coldAt2);

    const full = decodeState((await store.load(runId))!);
    expect(full.steps).toHaveLength(599);
    const warm = (await store.load(runId, { afterStep: 599 }))!;
    expect(warm).toMatchObject({ version: 600, steps: [], stepsAfter: 599 });
    expect(decodeState(warm, full.steps)).toEqual(full);
    const behind = (await store.load(runId, { afterStep: 598 }))!;
    expect(behind.steps).toHaveLength(1);
    expect(decodeState(behind, full.steps.slice(0, 598))).toEqual(full);
  });

  it('reads the head alone when the caller holds every step, and the head plus the missing records otherwise', async () => {
    const runId = 'resume-calls-run';
    await commitSteps(store, runId, 3);
    const counts = countCommands(resources.clients.dynamo);
    await store.load(runId, { afterStep: 3 });
    expect(Object.fromEntries(counts)).toEqual({ GetItemCommand: 1 });
    counts.clear();
    await store.load(runId, { afterStep: 1 });
    expect(Object.fromEntries(counts)).toEqual({ GetItemCommand: 1, QueryCommand: 1 });
    counts.clear();
    expect(await store.load('resume-calls-nobody', { afterStep: 3 })).toBeUndefined();
    expect(Object.fromEntries(counts)).toEqual({ GetItemCommand: 1 });
  });

  it('keeps a commit that lands between the head read and the records read out of the checkpoint', async () => {
    const runId = 'resume-race-run';
    await commitSteps(store, runId, 3);
    // The reader's own clients: after its head read returns, another worker commits step 4 before the
    // reader's Query is sent (an interleaving the server cannot be asked for).
    const clients = createAwsClients();
    const reader = resources.runtime({ clients }).store;
    let interleaved = false;
    (clients.dynamo.middlewareStack as { add(middleware: unknown, options: unknown): void }).add(
      (next: (args: unknown) => Promise<unknown>, context: { commandName?: string }) => async (args: unknown) => {
        const result = await next(args);
        if (context.commandName === 'GetItemCommand' && !interleaved) {
          interleaved = true;
          await store.commit({ runId, expectedVersion: 4, state: stateAfter(runId, 4), appended: recordFor(runId, 4), ...META });
        }
        return result;
      },
      { step: 'initialize', name: 'commit-between-reads' },
    );
    try {
      const known = decodeState((await store.load(runId))!).steps.slice(0, 1);
      const loaded = (await reader.load(runId, { afterStep: 1 }))!;
      expect(interleaved).toBe(true);
      expect(loaded.version).toBe(4);
      expect(decodeState(loaded, known).steps.map((s) => s.step)).toEqual([1, 2, 3]);
      expect((await store.load(runId))!.version).toBe(5);
    } finally {
      clients.destroy();
    }
  });

  it('reads a cold resume at step 600 in two Queries for no more capacity than at step 200, once the summaries are stored', async () => {
    const runId = 'resume-bounded-run';
    const reads = countReadUnits(resources.clients.dynamo);
    const counts = countCommands(resources.clients.dynamo);
    await store.create(newState(runId), META);
    let state = newState(runId);
    let version = 1;
    const unitsAt = async () => { reads.units = 0; counts.clear(); await store.load(runId, { recent: true }); return reads.units; };
    let at200 = 0;
    for (let n = 1; n <= 600; n++) {
      const record = recordFor(runId, n);
      state = completeStep(state, record, 3_000 + n);
      const summaries = condensedBlocks(n) > condensedBlocks(n - 1) ? [condensedBlock(state.steps.slice((condensedBlocks(n) - 1) * 100, condensedBlocks(n) * 100))] : [];
      version = (await store.commit({ runId, expectedVersion: version, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META })).version;
      if (n === 200) at200 = await unitsAt();
    }
    const at600 = await unitsAt();
    expect(Object.fromEntries(counts)).toEqual({ QueryCommand: 2 });
    reads.units = 0;
    await store.load(runId);
    const every = reads.units;
    expect(at600).toBeLessThanOrEqual(at200 + 1);
    expect(every).toBeGreaterThan(2 * at600);
    const bounded = decodeState((await store.load(runId, { recent: true }))!);
    expect(bounded).toMatchObject({ step: 600, stepsFrom: 400 });
    expect(bounded.condensed?.map((b) => b.last)).toEqual([100, 200, 300, 400]);
    expect(bounded.steps).toEqual(state.steps.slice(400));
  });

  it('leaves out of a bounded load the summary of a block not condensed at the head\'s step (a later checkpoint wrote it)', async () => {
    const runId = 'resume-summary-race';
    await commitSteps(store, runId, 320);
    const state = stateAfter(runId, 320);
    const put = (last: number) => resources.clients.doc.send(new PutCommand({
      TableName: resources.tableName,
      Item: { [PK]: runPk(runId), [SK]: summarySk(last), last, summary: encodeSummary(condensedBlock(state.steps.slice(last - 100, last))) },
    }));
    await put(100);
    await put(200);
    // Written by the checkpoint of step 401, which this read's head (step 320) does not include.
    await put(300);
    const loaded = (await store.load(runId, { recent: true }))!;
    expect(loaded.summaries).toHaveLength(2);
    expect(loaded.stepsAfter).toBe(200);
    expect(decodeState(loaded).steps).toEqual(state.steps.slice(200));
  });

  it('restores a spilled head, decision and step records on a warm load', async () => {
    const runId = 'resume-spill-run';
    // A low threshold spills every head and record too, not only the large decision.
    const spilling = resources.runtime({ spillBytes: 100 }).store;
    const big = 'a large decision input '.repeat(5_000);
    await commitSteps(spilling, runId, 2);
    await spilling.recordDecision(runId, 3, decisionFor(runId, 3, { payload: big }));
    const items = await rawItems(runId);
    const head = items.find((i) => i[SK] === HEAD_SK)!;
    expect([head.headRef, head.pendingRef, items.find((i) => i[SK] === stepSk(2))!.recordRef]).toEqual([
      expect.stringMatching(/^sha256:/), expect.stringMatching(/^sha256:/), expect.stringMatching(/^sha256:/),
    ]);
    const cold = decodeState((await spilling.load(runId))!);
    expect(cold.pending?.input).toEqual({ payload: big });
    expect(decodeState((await spilling.load(runId, { afterStep: 2 }))!, cold.steps)).toEqual(cold);
    expect(decodeState((await spilling.load(runId, { afterStep: 1 }))!, cold.steps.slice(0, 1))).toEqual(cold);
  });
});

describe('DynamoDB checkpoint store: values too large for an item', () => {
  it('spills an oversized head, decision and step record to S3 and loads them back unchanged', async () => {
    const runId = 'spill-run';
    const big = 'model chose this input '.repeat(20_000); // ~460 KB: more than a whole item may hold
    await store.create(newState(runId), META);
    await store.recordDecision(runId, 1, decisionFor(runId, 1, { payload: big }));
    const pending = decodeState((await store.load(runId))!).pending!;
    expect(pending.input).toEqual({ payload: big });
    const record = { ...recordFor(runId, 1, big), input: { payload: big } };
    const state = completeStep(decodeState((await store.load(runId))!), record, 5_000);
    await store.commit({ runId, expectedVersion: 1, state: complete(state, big, undefined, 6_000), appended: record, ...META });

    const items = await rawItems(runId);
    for (const item of items) expect(itemSize(item)).toBeLessThan(DYNAMODB_ITEM_LIMIT / 4);
    const head = items.find((i) => i[SK] === HEAD_SK)!;
    expect(head.head).toBeUndefined();
    expect(head.headRef).toMatch(/^sha256:/);
    expect(items.find((i) => i[SK] === stepSk(1))!.recordRef).toMatch(/^sha256:/);

    const loaded = decodeState((await store.load(runId))!);
    expect(loaded.summary).toBe(big);
    expect(loaded.steps[0]).toEqual(record);
  });

  it('is needed: DynamoDB Local itself refuses an item over 400 KB', async () => {
    await expect(resources.clients.doc.send(new PutCommand({
      TableName: resources.tableName, Item: { [PK]: 'too-big', [SK]: HEAD_SK, head: 'x'.repeat(401 * 1024) },
    }))).rejects.toMatchObject({ name: 'ValidationException' });
  });

  it('reports a spilled value that is gone as an unreadable checkpoint, never as a shorter run', async () => {
    const runId = 'lost-blob-run';
    await commitSteps(store, runId, 1);
    const missing = blobRef(Buffer.from('never stored'));
    await resources.clients.doc.send(new UpdateCommand({
      TableName: resources.tableName, Key: { [PK]: runPk(runId), [SK]: stepSk(1) },
      UpdateExpression: 'SET recordRef = :ref REMOVE #record', ExpressionAttributeNames: { '#record': 'record' },
      ExpressionAttributeValues: { ':ref': missing },
    }));
    const stored = (await store.load(runId))!;
    expect(() => decodeState(stored)).toThrow(/unreadable.*step 1/);
  });

  it('never lets a stale writer leave a step record or history row behind', async () => {
    const runId = 'stale-leftovers';
    await commitSteps(store, runId, 2);
    await expect(store.commit({ runId, expectedVersion: 2, state: stateAfter(runId, 3), appended: recordFor(runId, 3), ...META }))
      .rejects.toThrow(/stale/);
    const record = await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: runPk(runId), [SK]: stepSk(3) } }));
    expect(record.Item).toBeUndefined();
    const row = await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: runPk(runId), [SK]: checkpointSk(4) } }));
    expect(row.Item).toBeUndefined();
  });
});

describe('DynamoDB checkpoint store: a create with more records than one transaction holds', () => {
  const putRecord = (runId: string, step: number, text: string) => resources.clients.doc.send(new PutCommand({
    TableName: resources.tableName, Item: { [PK]: runPk(runId), [SK]: stepSk(step), step, record: text },
  }));

  it('a create that finds the run exists writes nothing; of two racing, the loser takes back the records past the winner\'s', async () => {
    await store.create(stateAfter('big-fork', 2), META);
    expect(await store.create(stateAfter('big-fork', 80), META)).toMatchObject({ created: false, version: 1 });
    expect((await rawItems('big-fork')).filter((i) => String(i[SK]).startsWith('s#'))).toHaveLength(2);

    // The longer create writes its records, then is held (a real call, sent late) until the shorter one won.
    const runId = 'big-race';
    const clients = createAwsClients();
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    (clients.dynamo.middlewareStack as { add(middleware: unknown, options: unknown): void }).add(
      (next: (args: unknown) => Promise<unknown>, context: { commandName?: string }) => async (args: unknown) => {
        if (context.commandName === 'TransactWriteItemsCommand') await released;
        return next(args);
      },
      { step: 'initialize', name: 'hold-transactions' },
    );
    const slow = resources.runtime({ clients }).store;
    const longer = slow.create(stateAfter(runId, 80), META);
    for (let tries = 0; (await rawItems(runId)).length < 80; tries++) {
      if (tries > 200) throw new Error('the longer create never wrote its records');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(await store.create(stateAfter(runId, 60), META)).toMatchObject({ created: true });
    release();
    expect(await longer).toMatchObject({ created: false, version: 1 });
    clients.destroy();
    const winner = decodeState((await store.load(runId))!);
    expect(winner.step).toBe(60);
    // No record past the winner's steps is left to block its next commit.
    expect((await rawItems(runId)).filter((i) => String(i[SK]).startsWith('s#'))).toHaveLength(winner.step);
    const record = recordFor(runId, winner.step + 1);
    await store.commit({ runId, expectedVersion: 1, state: completeStep(winner, record, 9_000), appended: record, ...META });
    expect(decodeState((await store.load(runId))!).step).toBe(winner.step + 1);
  });

  it('refuses records another unfinished create left under the id, and accepts its own after a crash', async () => {
    const state = stateAfter('left-behind', 60);
    await putRecord('left-behind', 7, JSON.stringify({ other: 'create' }));
    await expect(store.create(state, META)).rejects.toThrow(/holds step records of another create that never finished/);
    expect(await store.load('left-behind')).toBeUndefined();

    // The same create, retried after it died having written some of its records, goes through.
    const again = stateAfter('crashed-midway', 60);
    for (const s of again.steps.slice(0, 30)) await putRecord('crashed-midway', s.step, encodeStep(s));
    expect(await store.create(again, META)).toMatchObject({ created: true, version: 1 });
    expect(decodeState((await store.load('crashed-midway'))!).steps).toEqual(again.steps);
  });
});
