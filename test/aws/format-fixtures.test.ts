import { readFileSync } from 'node:fs';
import { PutItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterEach, describe, expect, it } from 'vitest';
import { defineAgent } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { advance } from '../../lib/engine/advance.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { silentLogger } from '../../lib/log.ts';
import { FixtureModel, fixtureAgent } from '../fixtures/formats/fixture-agent.ts';
import { FIXTURE_EPOCH, fixtureFormats, fixturePath, loadResumeComplete } from '../fixtures/formats/resume.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

interface DynamoFixture { format: number; epoch: number; items: Record<string, AttributeValue>[]; objects: { key: string; base64: string; metadata?: Record<string, string> }[] }

describe('checkpoint fixtures of every released format, DynamoDB and S3', () => {
  let resources: TestResources | undefined;
  afterEach(() => resources?.close());

  /** A fresh table and bucket holding the fixture's items and objects. */
  async function load(name: string | number): Promise<TestResources> {
    const fixture = JSON.parse(readFileSync(fixturePath(name, 'dynamodb.json'), 'utf8')) as DynamoFixture;
    expect(fixture).toMatchObject({ format: Number.parseInt(String(name), 10), epoch: FIXTURE_EPOCH });
    resources = await createTestResources(`fixture-${name}`);
    const { clients, tableName, bucketName } = resources;
    for (const item of fixture.items) await clients.dynamo.send(new PutItemCommand({ TableName: tableName, Item: item }));
    for (const object of fixture.objects) {
      await clients.s3.send(new PutObjectCommand({ Bucket: bucketName, Key: object.key, Body: Buffer.from(object.base64, 'base64'), Metadata: object.metadata }));
    }
    return resources;
  }

  it.each(fixtureFormats())('fixture $name: every run loads, resumes on today\'s code and completes', async ({ name }) => {
    const loaded = await load(name);
    const clock = new ManualClock(FIXTURE_EPOCH + 3600_000);
    await loadResumeComplete(name, loaded.runtime({ clock }), clock);
  });

  it('a recorded decision whose tool the new agent lacks fails its run and stays recorded, for a retry', async () => {
    const loaded = await load(2);
    const clock = new ManualClock(FIXTURE_EPOCH + 3600_000);
    const runtime = loaded.runtime({ clock });
    const { write_row: _gone, ...rest } = Object.fromEntries(fixtureAgent().tools.map((t) => [t.name, t]));
    const agent = defineAgent({ name: 'fixture-agent', tools: Object.values(rest) });
    const deps: EngineDeps = { ...runtime, model: new FixtureModel(), agent, clock, workerId: 'new', codeVersion: 'new', log: silentLogger };
    await advance(deps, 'pending-1');
    const stored = (await runtime.store.load('pending-1'))!;
    const state = decodeState(stored);
    expect(state).toMatchObject({ status: 'failed', reason: expect.stringContaining('calls tool "write_row", which agent fixture-agent no longer has') });
    expect(state.pending).toMatchObject({ step: 3, tool: 'write_row', input: { row: 3 }, idempotencyKey: 'pending-1/step-3' });
  });
});
