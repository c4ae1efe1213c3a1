import { readFileSync } from 'node:fs';
import { PutItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterEach, describe, expect, it } from 'vitest';
import { FIXTURE_EPOCH, fixtureFormats, fixturePath, loadResumeComplete } from '../fixtures/formats/resume.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

interface DynamoFixture { format: number; epoch: number; items: Record<string, AttributeValue>[]; objects: { key: string; base64: string }[] }

describe('checkpoint fixtures of every released format, DynamoDB and S3', () => {
  let resources: TestResources | undefined;
  afterEach(() => resources?.close());

  it.each(fixtureFormats())('format %i: every run loads, resumes on today\'s code and completes', async (format) => {
    const fixture = JSON.parse(readFileSync(fixturePath(format, 'dynamodb.json'), 'utf8')) as DynamoFixture;
    expect(fixture).toMatchObject({ format, epoch: FIXTURE_EPOCH });
    resources = await createTestResources(`fixture-${format}`);
    const { clients, tableName, bucketName } = resources;
    for (const item of fixture.items) await clients.dynamo.send(new PutItemCommand({ TableName: tableName, Item: item }));
    for (const object of fixture.objects) {
      await clients.s3.send(new PutObjectCommand({ Bucket: bucketName, Key: object.key, Body: Buffer.from(object.base64, 'base64') }));
    }
    const clock = new ManualClock(FIXTURE_EPOCH + 3600_000);
    await loadResumeComplete(format, resources.runtime({ clock }), clock);
  });
});
