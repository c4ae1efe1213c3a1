import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients, type AwsClients } from '../../lib/aws/clients.ts';
import { DynamoLedger } from '../../lib/aws/dynamo-ledger.ts';
import { LEDGER_SK, PK, SK, TTL_ATTRIBUTE, ledgerPk } from '../../lib/aws/table-layout.ts';
import { IdempotencyInProgressError } from '../../lib/core/errors.ts';
import type { BlobStore } from '../../lib/ports.ts';
import { HeldEffect, idempotencyLedgerContract } from '../contract/idempotency-ledger-contract.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { appliedThenFails, serverError, timeout, type AttemptMatcher } from './applied-then-fails.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

let resources: TestResources;
let blobs: BlobStore;
let now = 5_000_000_000_000;
let ledger: DynamoLedger;
beforeAll(async () => {
  resources = await createTestResources('ledger');
  const runtime = resources.runtime({ clock: { now: () => now } });
  ledger = runtime.ledger;
  blobs = runtime.blobs;
});
afterAll(() => resources?.close());

idempotencyLedgerContract('DynamoDB Local', () => ({
  ledger: (clock) => new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs, clock }),
  setFormat: async (key, format) => {
    await resources.clients.doc.send(new UpdateCommand({
      TableName: resources.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK },
      UpdateExpression: 'SET formatVersion = :f', ExpressionAttributeValues: { ':f': format },
    }));
  },
  givesUpBeforeLease: true,
}));

async function record(key: string): Promise<Record<string, unknown> | undefined> {
  return (await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK }, ConsistentRead: true }))).Item;
}

describe('DynamoDB idempotency ledger: what only DynamoDB has', () => {
  it('stores a completed record with a TTL past the retention window', async () => {
    expect(await ledger.once('run-a/step-1', { batch: 1 }, async () => ({ rows: 1 }))).toEqual({ rows: 1 });
    const item = await record('run-a/step-1');
    expect(item).toMatchObject({ status: 'completed', result: '{"rows":1}' });
    expect(item?.[TTL_ATTRIBUTE]).toBeGreaterThan(now / 1000);
  });

  it('keeps a result too large for an item in S3 and returns it to a retry', async () => {
    const big = 'r'.repeat(500 * 1024);
    expect(await ledger.once('run-a/step-6', {}, async () => big)).toBe(big);
    const item = await record('run-a/step-6');
    expect(item?.result).toBeUndefined();
    expect(item?.resultRef).toMatch(/^sha256:/);
    expect(await ledger.once('run-a/step-6', {}, async () => 'not again')).toBe(big);
  });

  it('is a fresh key again once its record outlived the retention window', async () => {
    const short = new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs, clock: { now: () => now }, retentionMs: 1000 });
    expect(await short.once('run-b/step-1', {}, async () => 'first')).toBe('first');
    now += 2000;
    expect(await short.once('run-b/step-1', {}, async () => 'after expiry')).toBe('after expiry');
  });
});

describe('DynamoDB idempotency ledger: a write the SDK retries after its first try was applied', () => {
  const opened: AwsClients[] = [];
  afterAll(() => { for (const clients of opened) clients.destroy(); });

  /** A ledger on its own client, whose first attempt of a matching write is applied and then fails. */
  function faultyLedger(matches: AttemptMatcher, error: () => Error, clock: ManualClock) {
    const clients = createAwsClients();
    opened.push(clients);
    const fault = appliedThenFails(clients.doc, matches, error);
    return { fault, ledger: new DynamoLedger({ doc: clients.doc, tableName: resources.tableName, blobs, clock }) };
  }
  /**
   * A ledger client whose calls `refuse` picks fail as the SDK's last retry of a throttled call does
   * (outside its retry loop: nothing is applied). Returns how many were refused.
   */
  function throttled(refuse: (commandName: string, input: object) => boolean): { clients: AwsClients; refused(): number } {
    const clients = createAwsClients();
    opened.push(clients);
    let refused = 0;
    (clients.doc.middlewareStack as { add(middleware: any, options: any): void }).add(
      (next: (args: { input: object }) => Promise<unknown>, context: { commandName?: string }) => async (args: { input: object }) => {
        if (refuse(context.commandName ?? '', args.input)) {
          refused++;
          throw Object.assign(new Error('Rate of requests exceeds the allowed throughput.'), { name: 'ThrottlingException', $fault: 'client' });
        }
        return next(args);
      },
      { step: 'initialize', name: 'throttle' },
    );
    return { clients, refused: () => refused };
  }
  const updateSetting = (attribute: string, value?: string) => (name: string, input: Record<string, unknown>) =>
    name === 'UpdateItemCommand' && JSON.stringify(input.ExpressionAttributeNames ?? {}).includes(`"${attribute}"`)
    && (value === undefined || JSON.stringify(input.ExpressionAttributeValues ?? {}).includes(`{"S":"${value}"}`));

  it('a claim whose answer was lost (a 500) is recognised on the retry as our own claim, and the effect runs once', async () => {
    const clock = new ManualClock();
    const { fault, ledger: faulty } = faultyLedger((name) => name === 'PutItemCommand', serverError, clock);
    let applied = 0;
    expect(await faulty.once('retry/claim/step-1', { n: 1 }, async () => `applied ${++applied}`)).toBe('applied 1');
    expect(fault.fired()).toBe(1);
    expect(fault.attempts()).toBe(2);
    expect(applied).toBe(1);
    expect(await record('retry/claim/step-1')).toMatchObject({ status: 'completed', result: '"applied 1"' });
  });

  it('a completion whose answer was lost (a timeout) is a success on the retry, with our result on record', async () => {
    const clock = new ManualClock();
    const { fault, ledger: faulty } = faultyLedger(updateSetting('status', 'completed'), timeout, clock);
    expect(await faulty.once('retry/complete/step-1', {}, async () => ({ rows: 7 }))).toEqual({ rows: 7 });
    expect(fault.fired()).toBe(1);
    expect(fault.attempts()).toBe(2);
    expect(await record('retry/complete/step-1')).toMatchObject({ status: 'completed', result: '{"rows":7}' });
    expect(await faulty.once('retry/complete/step-1', {}, async () => 'not again')).toEqual({ rows: 7 });
  });

  it('a lease renewal whose answer was lost (a 500) still counts: the claim stays ours', async () => {
    const clock = new ManualClock();
    const { fault, ledger: faulty } = faultyLedger(updateSetting('leaseUntil'), serverError, clock);
    const slow = new HeldEffect();
    const done = faulty.once('retry/renew/step-1', {}, slow.effect, { leaseMs: 60_000 });
    await slow.started();
    await clock.pass(70_000);
    expect(fault.fired()).toBe(1);
    expect(slow.signal?.aborted).toBe(false);
    const other = new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs, clock: clock.process() });
    await expect(other.once('retry/renew/step-1', {}, async () => 'not while held')).rejects.toBeInstanceOf(IdempotencyInProgressError);
    slow.finish('held for 70 s');
    expect(await done).toBe('held for 70 s');
  });

  it('a completion refused outright (throttled past the SDK\'s retries) is tried again: the effect is on record and never runs again', async () => {
    const clock = new ManualClock();
    let left = 2;
    const { clients, refused } = throttled((name, input) => left > 0 && /Update/.test(name) && JSON.stringify(input).includes('"completed"') && left-- > 0);
    const faulty = new DynamoLedger({ doc: clients.doc, tableName: resources.tableName, blobs, clock });
    let applied = 0;
    expect(await faulty.once('refused/complete/step-1', {}, async () => `applied ${++applied}`)).toBe('applied 1');
    expect(refused()).toBe(2);
    expect(await record('refused/complete/step-1')).toMatchObject({ status: 'completed', result: '"applied 1"' });
    // Past the lease: a later attempt of the step gets the result, not a second application.
    await clock.pass(120_000);
    const other = new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs, clock: clock.process() });
    expect(await other.once('refused/complete/step-1', {}, async () => `applied ${++applied}`)).toBe('applied 1');
    expect(applied).toBe(1);
  });

  it('a holder that froze past its lease and comes back to throttled renewals knows its claim is gone: its signal aborts before it acts', async () => {
    // The chaos schedule of seed 3128046278: a frozen worker thawed during a throttle brownout, its
    // renewal was refused, and its ledger-only effect (which checks its signal) was applied a second time.
    const root = new ManualClock();
    const frozen = root.process();
    let brownout = false;
    const { clients, refused } = throttled(() => brownout);
    const key = 'frozen/throttled-renewal/step-1';
    const a = new HeldEffect();
    const aDone = new DynamoLedger({ doc: clients.doc, tableName: resources.tableName, blobs, clock: frozen }).once(key, {}, a.effect, { leaseMs: 60_000 })
      .then((v) => ({ value: v }), (e: unknown) => ({ error: e }));
    await a.started();
    frozen.freeze();
    await root.pass(60_001);
    const b = new HeldEffect();
    const bDone = new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs, clock: root.process() }).once(key, {}, b.effect, { leaseMs: 60_000 });
    await root.settle(b.started());
    brownout = true;
    await frozen.thaw();
    // Frozen past the window a contender watches a claim before taking it over: it gives up on thaw,
    // before any renewal goes out. Was: it gave up once a throttled renewal came back, then only at the lease.
    expect(refused()).toBe(0);
    expect(a.signal?.aborted).toBe(true);
    expect(a.signal?.reason).toMatchObject({ name: 'ClaimLostError', message: expect.stringContaining('another attempt may take the key over') });
    expect(b.signal?.aborted).toBe(false);
    a.fail(a.signal!.reason as Error);
    expect(await aDone).toMatchObject({ error: expect.objectContaining({ name: 'ClaimLostError' }) });
    b.finish('B');
    expect(await bDone).toBe('B');
    expect(await record(key)).toMatchObject({ status: 'completed', result: '"B"' });
  });

  it('a renewal throttled once does not cost the claim: the next one, inside a contender\'s watch, lands and keeps it', async () => {
    const clock = new ManualClock();
    let refusing = 1;
    const { clients } = throttled((name) => refusing > 0 && /Update/.test(name) && refusing-- > 0);
    const slow = new HeldEffect();
    const done = new DynamoLedger({ doc: clients.doc, tableName: resources.tableName, blobs, clock }).once('throttled/renewals/step-1', {}, slow.effect, { leaseMs: 60_000 });
    await slow.started();
    // The tick at 20 s is refused; the one at 40 s lands, before a contender's 41 s watch could end.
    // (Two refused in a row cost the claim: test/aws/ledger-clock-skew.test.ts.)
    await clock.pass(59_999);
    expect(refusing).toBe(0);
    expect(slow.signal?.aborted).toBe(false);
    await clock.pass(30_000);
    expect(slow.signal?.aborted).toBe(false);
    slow.finish('kept');
    expect(await done).toBe('kept');
  });

  it('a release whose answer was lost (a timeout) leaves the key free for the retry', async () => {
    const clock = new ManualClock();
    const { fault, ledger: faulty } = faultyLedger((name) => name === 'DeleteItemCommand', timeout, clock);
    await expect(faulty.once('retry/release/step-1', {}, async () => { throw new Error('boom'); })).rejects.toThrow('boom');
    expect(fault.fired()).toBe(1);
    expect(await record('retry/release/step-1')).toBeUndefined();
    expect(await faulty.once('retry/release/step-1', {}, async () => 'second try')).toBe('second try');
  });
});
