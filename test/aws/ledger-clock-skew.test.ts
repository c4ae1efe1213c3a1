import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { DynamoLedger } from '../../lib/aws/dynamo-ledger.ts';
import { LEDGER_SK, PK, SK, ledgerPk } from '../../lib/aws/table-layout.ts';
import { IdempotencyInProgressError } from '../../lib/core/errors.ts';
import type { BlobStore } from '../../lib/ports.ts';
import { HeldEffect } from '../contract/idempotency-ledger-contract.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, pollOnce } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel } from './write-rows-agent.ts';

const LEASE_MS = 60_000;
/** How long a contender watches a claim its clock says ran out: two renewals (20 s each) and the margin. */
const WINDOW_MS = 41_000;

let resources: TestResources;
let blobs: BlobStore;
beforeAll(async () => {
  resources = await createTestResources('ledger-skew');
  blobs = resources.runtime().blobs;
});
afterAll(() => resources?.close());

let counter = 0;
const uniqueKey = (label: string) => `skew-${label}-${Date.now()}-${counter++}/step-1`;
const ledgerOn = (clock: ManualClock) => new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs, clock });

async function record(key: string): Promise<Record<string, unknown> | undefined> {
  return (await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK }, ConsistentRead: true }))).Item;
}

/** A holds the key with a live effect on the line's clock; the contender's wall clock runs two leases ahead. */
async function heldByA(label: string) {
  const root = new ManualClock();
  const key = uniqueKey(label);
  const holder = root.process();
  const a = new HeldEffect();
  const aDone = ledgerOn(holder).once(key, {}, a.effect, { leaseMs: LEASE_MS });
  await a.started();
  const ahead = root.process().skew(2 * LEASE_MS);
  return { root, key, holder, a, aDone, ahead };
}

describe('DynamoDB ledger: a contender whose wall clock runs ahead never takes a live holder\'s claim', () => {
  it('a holder that renews keeps its claim against a contender two leases ahead: the effect is applied once', async () => {
    const { root, key, a, aDone, ahead } = await heldByA('live');
    let applied = 0;
    const b = ledgerOn(ahead).once(key, {}, async () => `B applied ${++applied}`, { leaseMs: LEASE_MS });
    // The contender's clock says the lease ran out long ago; it watches the claim, and the holder renews meanwhile.
    const refused = await root.settle(b).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(IdempotencyInProgressError);
    expect(applied).toBe(0);
    expect(a.signal?.aborted).toBe(false);
    a.finish('A');
    expect(await aDone).toBe('A');
    expect(await record(key)).toMatchObject({ status: 'completed', result: '"A"' });
    expect(await root.settle(ledgerOn(ahead).once(key, {}, async () => `B applied ${++applied}`))).toBe('A');
    expect(applied).toBe(0);
  });

  it('a holder that died is taken over once the window has passed on the contender\'s own time, not before', async () => {
    const { root, key, holder, a, ahead } = await heldByA('dead');
    holder.kill();
    const b = new HeldEffect();
    const bDone = ledgerOn(ahead).once(key, {}, b.effect, { leaseMs: LEASE_MS });
    expect(await root.asleep(b.started())).toBe(false);
    await root.pass(WINDOW_MS - 1);
    expect(b.runs).toBe(0);
    expect(await record(key)).toMatchObject({ status: 'in_progress', token: expect.any(String) });
    await root.settle(b.started());
    expect(b.runs).toBe(1);
    b.finish('B');
    expect(await bDone).toBe('B');
    expect(await record(key)).toMatchObject({ status: 'completed', result: '"B"' });
    expect(a.runs).toBe(1);
  });

  it('a holder that comes back just inside the window and renews keeps its claim', async () => {
    const { root, key, holder, a, aDone, ahead } = await heldByA('back');
    holder.freeze();
    let applied = 0;
    const b = ledgerOn(ahead).once(key, {}, async () => `B applied ${++applied}`, { leaseMs: LEASE_MS });
    expect(await root.asleep(b)).toBe(false);
    await root.pass(WINDOW_MS - 1_000);
    // The holder's process runs again (a GC pause, a SIGSTOP ended): its overdue renewal lands.
    await holder.thaw();
    expect(a.signal?.aborted).toBe(false);
    await expect(root.settle(b)).rejects.toBeInstanceOf(IdempotencyInProgressError);
    expect(applied).toBe(0);
    a.finish('A');
    expect(await aDone).toBe('A');
  });

  it('a try that comes back to the same claim, unchanged, counts the time it already watched it: it does not wait again', async () => {
    const { root, key, holder, ahead } = await heldByA('remembered');
    holder.kill();
    const contender = ledgerOn(ahead);
    // The first try's time runs out while it watches (the step's signal): it ends without the key.
    const stop = new AbortController();
    const first = contender.once(key, {}, async () => 'first try', { leaseMs: LEASE_MS, signal: stop.signal });
    expect(await root.asleep(first)).toBe(false);
    await root.pass(20_000);
    stop.abort(new Error('out of time'));
    const cut = await first.catch((e: unknown) => e) as IdempotencyInProgressError;
    expect(cut).toBeInstanceOf(IdempotencyInProgressError);
    expect(cut.retryAfterMs).toBe(WINDOW_MS - 20_000);
    await root.pass(cut.retryAfterMs);
    // The retry on the same ledger: the claim unchanged for the whole window, taken over without a wait.
    const second = contender.once(key, {}, async () => 'second try', { leaseMs: LEASE_MS });
    expect(await root.asleep(second)).toBe(true);
    expect(await second).toBe('second try');
  });

  it('a try that saw the claim live earlier and finds it unchanged once its lease ran out takes it over at once', async () => {
    const root = new ManualClock();
    const key = uniqueKey('seen-live');
    const holder = root.process();
    const a = new HeldEffect();
    void ledgerOn(holder).once(key, {}, a.effect, { leaseMs: LEASE_MS }).catch(() => undefined);
    await a.started();
    holder.kill();
    const contender = ledgerOn(root.process());
    await root.pass(10_000);
    await expect(contender.once(key, {}, async () => 'early')).rejects.toBeInstanceOf(IdempotencyInProgressError);
    await root.pass(LEASE_MS);
    // Seen unchanged for 60 s, over the window: no wait.
    const again = contender.once(key, {}, async () => 'taken over');
    expect(await root.asleep(again)).toBe(true);
    expect(await again).toBe('taken over');
  });
});

describe('DynamoDB ledger: a contender whose wall clock runs behind', () => {
  it('is told to come back within one of the holder\'s leases, not when its own clock reaches the lease\'s end an hour on', async () => {
    const root = new ManualClock();
    const key = uniqueKey('behind');
    const a = new HeldEffect();
    const aDone = ledgerOn(root.process()).once(key, {}, a.effect, { leaseMs: LEASE_MS });
    await a.started();
    const behind = root.process().skew(-3_600_000);
    const refused = await ledgerOn(behind).once(key, {}, async () => 'B').catch((e: unknown) => e) as IdempotencyInProgressError;
    expect(refused).toBeInstanceOf(IdempotencyInProgressError);
    // Was an hour and a minute: its step's message, and on a FIFO queue every later one of its run, parked for that long.
    expect(refused.retryAfterMs).toBe(LEASE_MS + 1_000);
    a.finish('A');
    expect(await aDone).toBe('A');
  });
});

describe('DynamoDB ledger: a holder whose wall clock ran ahead, then died', () => {
  it('leaves a lease that looks minutes long; its key is taken over once the claim has been seen unchanged for the window, not when other clocks catch up', async () => {
    const root = new ManualClock();
    const key = uniqueKey('dead-ahead');
    const holder = root.process().skew(10 * LEASE_MS);
    const a = new HeldEffect();
    void ledgerOn(holder).once(key, {}, a.effect, { leaseMs: LEASE_MS }).catch(() => undefined);
    await a.started();
    holder.kill();
    const contender = ledgerOn(root.process());
    const first = await contender.once(key, {}, async () => 'B').catch((e: unknown) => e) as IdempotencyInProgressError;
    expect(first).toBeInstanceOf(IdempotencyInProgressError);
    expect(first.retryAfterMs).toBe(LEASE_MS + 1_000);
    await root.pass(first.retryAfterMs);
    // Seen unchanged for 61 s, over the 41 s window. Was: busy again, until this clock reached the lease's
    // end ten minutes on (the run's step left for that long).
    expect(await contender.once(key, {}, async () => 'B')).toBe('B');
    expect(await record(key)).toMatchObject({ status: 'completed', result: '"B"' });
  });
});

describe('DynamoDB ledger: a holder cut off from the table', () => {
  /**
   * A holds the key with a live effect; `refuse` says, at each renewal A sends, whether a brownout that
   * reaches only A throttles it (as DynamoDB answers past the SDK's retries). B's wall clock runs two leases ahead.
   */
  async function renewalsRefused(label: string, refuse: () => boolean) {
    const root = new ManualClock();
    const key = uniqueKey(label);
    const doc = resources.clients.doc;
    let refused = 0;
    const holderDoc = {
      send: (command: Parameters<typeof doc.send>[0]) => {
        if (command instanceof UpdateCommand && refuse()) {
          refused++;
          return Promise.reject(Object.assign(new Error('Rate of requests exceeds the allowed throughput'), { name: 'ThrottlingException' }));
        }
        return doc.send(command);
      },
    } as typeof doc;
    const a = new HeldEffect();
    const aDone = new DynamoLedger({ doc: holderDoc, tableName: resources.tableName, blobs, clock: root.process() }).once(key, {}, a.effect, { leaseMs: LEASE_MS });
    await a.started();
    return { root, key, a, aDone, ahead: root.process().skew(2 * LEASE_MS), refused: () => refused };
  }

  it('has aborted its effect\'s signal before a contender whose clock runs ahead may take the key over', async () => {
    let cutOff = true;
    const { root, key, a, aDone, ahead, refused } = await renewalsRefused('cut-off', () => cutOff);
    let holderAbortedFirst: boolean | undefined;
    const b = ledgerOn(ahead).once(key, {}, async () => {
      holderAbortedFirst = a.signal?.aborted;
      return 'B';
    }, { leaseMs: LEASE_MS });
    expect(await root.settle(b)).toBe('B');
    // Two renewals refused (at 20 s and 40 s), then the watch (41 s) ended. Was: the holder gave up only
    // once a whole lease (60 s) had passed, and its effect, checking its signal, acted beside B's.
    expect(refused()).toBe(2);
    expect(holderAbortedFirst).toBe(true);
    expect(a.signal?.reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('another attempt may take the key over') });
    cutOff = false;
    a.finish('A');
    await aDone;
    expect(await record(key)).toMatchObject({ status: 'completed', result: '"B"' });
  });

  it('keeps its claim through one refused renewal: the next one lands inside the window', async () => {
    let refuse = 1;
    const { root, key, a, aDone, ahead, refused } = await renewalsRefused('one-refused', () => refuse-- > 0);
    let applied = 0;
    const b = ledgerOn(ahead).once(key, {}, async () => ++applied, { leaseMs: LEASE_MS });
    await expect(root.settle(b)).rejects.toBeInstanceOf(IdempotencyInProgressError);
    expect(refused()).toBe(1);
    expect(a.signal?.aborted).toBe(false);
    expect(applied).toBe(0);
    a.finish('A');
    expect(await aDone).toBe('A');
  });
});

describe('DynamoDB ledger: a claim older code wrote (no leaseRev)', () => {
  async function olderClaim(label: string) {
    const { root, key, holder, a, ahead } = await heldByA(label);
    holder.kill();
    // As older code wrote it: no rev at all.
    await resources.clients.doc.send(new UpdateCommand({ TableName: resources.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK }, UpdateExpression: 'REMOVE leaseRev' }));
    return { root, key, a, ahead };
  }

  it('is taken over after the window when nothing changed', async () => {
    const { root, key, ahead } = await olderClaim('old-dead');
    expect(await root.settle(ledgerOn(ahead).once(key, {}, async () => 'taken over'))).toBe('taken over');
    expect(await record(key)).toMatchObject({ status: 'completed', result: '"taken over"', leaseRev: expect.any(String) });
  });

  it('is not taken over when its holder renewed as older code does (a new lease, still no rev)', async () => {
    const { root, key, ahead } = await olderClaim('old-live');
    let applied = 0;
    const b = ledgerOn(ahead).once(key, {}, async () => ++applied);
    expect(await root.asleep(b)).toBe(false);
    await root.pass(20_000);
    await resources.clients.doc.send(new UpdateCommand({
      TableName: resources.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK },
      UpdateExpression: 'SET leaseUntil = :until, updatedAt = :now', ExpressionAttributeValues: { ':until': root.now() + LEASE_MS, ':now': root.now() },
    }));
    await expect(root.settle(b)).rejects.toBeInstanceOf(IdempotencyInProgressError);
    expect(applied).toBe(0);
  });
});

describe('a tool whose timeoutMs is shorter than the watch of a dead holder\'s claim', () => {
  it('runs out of time while its ctx.once watches the claim: not a failed try, the key is held and the message comes back', async () => {
    const shortLived = await createTestResources('watch-timeout');
    try {
      const db = new FakeDatabase();
      const agent = defineAgent({
        name: 'short-timeout',
        tools: [tool({
          name: 'write_row', description: 'writes one row, once', input: z.object({ batch: z.number() }), sideEffect: true, timeoutMs: 300,
          run: (input, ctx) => ctx.once(() => db.apply(ctx.idempotencyKey, input.batch)),
        })],
      });
      const runtime = shortLived.runtime();
      const runId = await startTestRun(runtime, agent, `watch-timeout-${Date.now()}`);
      // An attempt ten minutes ago claimed step 1's key and died: its lease ran out by every clock.
      const past = new ManualClock(Date.now() - 10 * 60_000);
      void new DynamoLedger({ doc: shortLived.clients.doc, tableName: shortLived.tableName, blobs: runtime.blobs, clock: past })
        .once(idempotencyKey(runId, 1), { batch: 1 }, () => new Promise(() => {}), { leaseMs: LEASE_MS });
      await vi.waitFor(async () => expect(await shortLived.clients.doc.send(new GetCommand({ TableName: shortLived.tableName, Key: { [PK]: ledgerPk(idempotencyKey(runId, 1)), [SK]: LEDGER_SK } }))).toMatchObject({ Item: { status: 'in_progress' } }));

      const worker = new WorkerProcess({ resources: shortLived, agent, model: new ScriptedModel({ steps: 1 }) });
      const polled = await pollOnce(shortLived.clients, shortLived.queueUrl, worker);
      worker.close();
      // The watch (41 s) outlasts the tool's 300 ms: the try ends without the key, and without a failure.
      // Was: a failed try (ToolTimeoutError), and the run failed at its third before any try could watch long enough.
      expect(polled.failures).toHaveLength(1);
      expect(await runtime.store.load(runId)).toMatchObject({ status: 'running', version: 1 });
      expect(decodeState((await runtime.store.load(runId))!)).toMatchObject({ failures: 0 });
      expect(db.applied.size).toBe(0);
    } finally {
      shortLived.close();
    }
  });
});
