import { CreateTableCommand, DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../lib/aws/clients.ts';
import { ensureTable } from '../../lib/aws/provision.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { uniqueName } from './aws-fixtures.ts';

/**
 * ensureTable on a name taken by another application's table: it once added the deadline index and
 * turned TTL on `expiresAt` on (deleting that application's items that carry one), then reported success.
 */
const clients = createAwsClients();
afterAll(() => clients.destroy());

async function otherTable(keys: { name: string; type: 'HASH' | 'RANGE' }[]): Promise<string> {
  const name = uniqueName('foreign');
  await clients.dynamo.send(new CreateTableCommand({
    TableName: name, BillingMode: 'PAY_PER_REQUEST',
    AttributeDefinitions: keys.map((k) => ({ AttributeName: k.name, AttributeType: 'S' })),
    KeySchema: keys.map((k) => ({ AttributeName: k.name, KeyType: k.type })),
  }));
  return name;
}

async function untouched(name: string): Promise<void> {
  const table = (await clients.dynamo.send(new DescribeTableCommand({ TableName: name }))).Table!;
  expect(table.GlobalSecondaryIndexes ?? []).toEqual([]);
  const ttl = (await clients.dynamo.send(new DescribeTimeToLiveCommand({ TableName: name }))).TimeToLiveDescription;
  expect(ttl?.TimeToLiveStatus).not.toMatch(/ENABL/);
}

describe('ensureTable on an existing table of another layout', () => {
  it('refuses a table with other keys, naming it, and changes nothing', async () => {
    const name = await otherTable([{ name: 'id', type: 'HASH' }]);
    const error = await ensureTable(clients.dynamo, name).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toMatch(new RegExp(`^table ${name} exists and is not a stepwise table`));
    await untouched(name);
  });

  it('refuses a pk/sk table without the status index (another single-table design)', async () => {
    const name = await otherTable([{ name: 'pk', type: 'HASH' }, { name: 'sk', type: 'RANGE' }]);
    await expect(ensureTable(clients.dynamo, name)).rejects.toThrow(/is not a stepwise table/);
    await untouched(name);
  });

  it('still brings its own table up to date', async () => {
    const name = uniqueName('own');
    await ensureTable(clients.dynamo, name);
    await ensureTable(clients.dynamo, name);
    const table = (await clients.dynamo.send(new DescribeTableCommand({ TableName: name }))).Table!;
    expect(table.GlobalSecondaryIndexes?.map((i) => i.IndexName).sort()).toEqual(['by-status', 'by-wait-deadline']);
  });
});
