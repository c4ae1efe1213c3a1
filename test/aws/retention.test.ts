import { readFileSync } from 'node:fs';
import { PutItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { DeleteCommand, QueryCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, it } from 'vitest';
import { sweepBlobs } from '../../lib/aws/blob-sweep.ts';
import { openAwsRuntime } from '../../lib/aws/runtime.ts';
import { PK, SK, TTL_ATTRIBUTE, checkpointSk, runPk } from '../../lib/aws/table-layout.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { MAX_RETENTION_DAYS } from '../../lib/core/retention.ts';
import { RETENTION_DAYS_ENV } from '../../lib/settings.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { blobRef } from '../../lib/core/result.ts';
import { FIXTURE_EPOCH, fixturePath, loadResumeComplete } from '../fixtures/formats/resume.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

const DAY = 24 * 3600_000;

describe('retention on AWS', () => {
  let resources: TestResources | undefined;
  afterEach(() => resources?.close());

  it('expires history rows through TTL 14 days after they were written; the head never expires', async () => {
    resources = await createTestResources('retention');
    const now = 1_700_000_000_000;
    const store = resources.runtime({ clock: { now: () => now } }).store;
    await store.create(newState('r'), META);
    await store.commit({ runId: 'r', expectedVersion: 1, state: stateAfter('r', 1), appended: recordFor('r', 1), ...META });
    const { Items } = await resources.clients.doc.send(new QueryCommand({
      TableName: resources.tableName, KeyConditionExpression: '#pk = :pk', ExpressionAttributeNames: { '#pk': PK }, ExpressionAttributeValues: { ':pk': runPk('r') },
    }));
    const bySk = new Map((Items ?? []).map((item) => [String(item[SK]), item]));
    expect(bySk.get(checkpointSk(1))?.[TTL_ATTRIBUTE]).toBe(Math.ceil((now + 14 * DAY) / 1000));
    expect(bySk.get(checkpointSk(2))?.[TTL_ATTRIBUTE]).toBe(Math.ceil((now + 14 * DAY) / 1000));
    expect(bySk.get('h')?.[TTL_ATTRIBUTE]).toBeUndefined();
  });

  it('a window past what a TTL can hold ("keep forever" as 999999999999 days) is refused when the runtime opens, where every write failed', async () => {
    resources = await createTestResources('retention-huge');
    const { tableName, bucketName, queueUrl, clients } = resources;
    const open = (days: string) => openAwsRuntime({ tableName, bucketName, queueUrl, clients }, { [RETENTION_DAYS_ENV]: days });
    expect(() => open('999999999999')).toThrow(new InvalidInputError(`${RETENTION_DAYS_ENV} must be at most ${MAX_RETENTION_DAYS} days, got "999999999999"`));
    // The longest it takes is written and read back.
    const store = open(String(MAX_RETENTION_DAYS)).store;
    await store.create(newState('r'), META);
    await store.commit({ runId: 'r', expectedVersion: 1, state: stateAfter('r', 1), appended: recordFor('r', 1), ...META });
    expect((await store.load('r'))!.version).toBe(2);
  });

  it('never removes what a live run needs: after TTL and a blob sweep, a waiting run older than the window resumes, and so does every other', async () => {
    resources = await createTestResources('retention-live');
    const { clients, tableName, bucketName } = resources;
    const fixture = JSON.parse(readFileSync(fixturePath(2, 'dynamodb.json'), 'utf8')) as { items: Record<string, AttributeValue>[]; objects: { key: string; base64: string }[] };
    for (const item of fixture.items) await clients.dynamo.send(new PutItemCommand({ TableName: tableName, Item: item }));
    for (const object of fixture.objects) await clients.s3.send(new PutObjectCommand({ Bucket: bucketName, Key: object.key, Body: Buffer.from(object.base64, 'base64') }));
    // Spill every value over 200 bytes from here on, so heads, decisions and records live in S3 too.
    const clock = new ManualClock(FIXTURE_EPOCH + 20 * DAY);
    const runtime = resources.runtime({ clock, spillBytes: 200 });
    const orphan = Buffer.from('o'.repeat(5000));
    await runtime.blobs.put(blobRef(orphan), orphan);

    // What DynamoDB's TTL does in the background: every item past its expiresAt goes.
    const expire = async () => {
      const { Items } = await clients.doc.send(new ScanCommand({ TableName: tableName }));
      let removed = 0;
      for (const item of Items ?? []) {
        if (typeof item[TTL_ATTRIBUTE] === 'number' && item[TTL_ATTRIBUTE] < clock.now() / 1000) {
          await clients.doc.send(new DeleteCommand({ TableName: tableName, Key: { [PK]: item[PK], [SK]: item[SK] } }));
          removed++;
        }
      }
      return removed;
    };
    // S3 stamps objects with its own time: judge their age as if two days had passed since.
    const sweep = () => sweepBlobs({ doc: clients.doc, s3: clients.s3, tableName, bucketName, blobs: runtime.blobs, now: Date.now() + 2 * DAY });

    expect(await expire()).toBeGreaterThan(0);
    const swept = await sweep();
    expect(swept).toMatchObject({ deleted: 1, referenced: 1 });
    expect(await runtime.blobs.get(blobRef(orphan))).toBeUndefined();
    const after = await loadResumeComplete(2, runtime, clock, { historyPruned: true });
    expect(after['waiting-1']).toMatchObject({ status: 'completed', step: 3 });

    // The resumed runs' spilled values are referenced from the table: a later TTL pass and sweep leave
    // every run readable, and collect only what nothing refers to any more.
    const objects = async () => (await clients.s3.send(new ListObjectsV2Command({ Bucket: bucketName }))).Contents?.length ?? 0;
    expect(await objects()).toBeGreaterThan(5);
    clock.advance(15 * DAY);
    await expire();
    const later = await sweep();
    expect(later.deleted).toBeGreaterThan(0);
    expect(await objects()).toBe(later.referenced);
    for (const runId of Object.keys(after)) {
      expect(decodeState((await runtime.store.load(runId))!)).toMatchObject({ status: 'completed', step: after[runId]!.step });
    }
  });
});
