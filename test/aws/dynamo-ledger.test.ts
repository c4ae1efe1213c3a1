import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoLedger } from '../../lib/aws/dynamo-ledger.ts';
import { LEDGER_SK, PK, SK, TTL_ATTRIBUTE, ledgerPk } from '../../lib/aws/table-layout.ts';
import { IdempotencyInProgressError, IdempotencyKeyReuseError } from '../../lib/core/errors.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

let resources: TestResources;
let now = 5_000_000_000_000;
let ledger: DynamoLedger;
beforeAll(async () => {
  resources = await createTestResources('ledger');
  ledger = resources.runtime({ clock: { now: () => now } }).ledger;
});
afterAll(() => resources?.close());

async function record(key: string): Promise<Record<string, unknown> | undefined> {
  return (await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK }, ConsistentRead: true }))).Item;
}

describe('DynamoDB idempotency ledger (same semantics as the SQLite ledger)', () => {
  it('applies an effect once and returns the remembered result to a retry', async () => {
    let applied = 0;
    const effect = async () => ({ rows: ++applied });
    expect(await ledger.once('run-a/step-1', { batch: 1 }, effect)).toEqual({ rows: 1 });
    expect(await ledger.once('run-a/step-1', { batch: 1 }, effect)).toEqual({ rows: 1 });
    expect(applied).toBe(1);
    const item = await record('run-a/step-1');
    expect(item).toMatchObject({ status: 'completed', result: '{"rows":1}' });
    expect(item?.[TTL_ATTRIBUTE]).toBeGreaterThan(now / 1000);
  });

  it('refuses a key used again with other arguments (key order does not matter)', async () => {
    await ledger.once('run-a/step-2', { a: 1, b: 2 }, async () => 'ok');
    expect(await ledger.once('run-a/step-2', { b: 2, a: 1 }, async () => 'again')).toBe('ok');
    await expect(ledger.once('run-a/step-2', { a: 1, b: 3 }, async () => 'other')).rejects.toBeInstanceOf(IdempotencyKeyReuseError);
  });

  it('lets exactly one of several concurrent attempts apply the effect', async () => {
    let applied = 0;
    const effect = async () => { applied++; await new Promise((r) => setTimeout(r, 100)); return 'done'; };
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => ledger.once('run-a/step-3', { x: 1 }, effect)));
    expect(applied).toBe(1);
    for (const r of results) {
      if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(IdempotencyInProgressError);
      else expect(r.value).toBe('done');
    }
  });

  it('releases the claim when the effect fails, so the retry runs it', async () => {
    await expect(ledger.once('run-a/step-4', {}, async () => { throw new Error('boom'); })).rejects.toThrow('boom');
    expect(await record('run-a/step-4')).toBeUndefined();
    expect(await ledger.once('run-a/step-4', {}, async () => 'second try')).toBe('second try');
  });

  it('takes over the lease of a crashed attempt only after it expired', async () => {
    const crashed = ledger.once('run-a/step-5', { y: 1 }, () => new Promise<never>(() => undefined), { leaseMs: 30_000 });
    void crashed;
    await new Promise((r) => setTimeout(r, 100));
    await expect(ledger.once('run-a/step-5', { y: 1 }, async () => 'too early')).rejects.toBeInstanceOf(IdempotencyInProgressError);
    now += 30_001;
    expect(await ledger.once('run-a/step-5', { y: 1 }, async () => 'taken over')).toBe('taken over');
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
    const short = new DynamoLedger({ doc: resources.clients.doc, tableName: resources.tableName, blobs: resources.runtime().blobs, clock: { now: () => now }, retentionMs: 1000 });
    expect(await short.once('run-b/step-1', {}, async () => 'first')).toBe('first');
    now += 2000;
    expect(await short.once('run-b/step-1', {}, async () => 'after expiry')).toBe('after expiry');
  });
});
