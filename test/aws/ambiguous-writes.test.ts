import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, it } from 'vitest';
import { createAwsClients, type AwsClients } from '../../lib/aws/clients.ts';
import { HEAD_SK, PK, SK, runPk } from '../../lib/aws/table-layout.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { META, decisionFor, newState, recordFor, stateAfter } from '../support/states.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';
import { loseFirstResponse } from './lost-response.ts';

/**
 * A conditional write whose first attempt DynamoDB applied, but whose answer was lost (a 500 or a timeout
 * after the write): the SDK sends it again, and the retry meets the state the first attempt left.
 */

let resources: TestResources | undefined;
let clients: AwsClients | undefined;
afterEach(() => {
  clients?.destroy();
  resources?.close();
});

/** A store on its own clients, so the lost answer affects only its writes. */
async function faultyStore(label: string, options: { spillBytes?: number } = {}) {
  resources = await createTestResources(label);
  clients = createAwsClients();
  const store = resources.runtime({ clients, ...options }).store;
  const clean = resources.runtime(options).store;
  return { store, clean, clients };
}

describe('a write the SDK retried after it was applied', () => {
  it('recordDecision: the retry finds our own decision recorded, and that is success', async () => {
    const { store, clean, clients } = await faultyStore('lost-decision');
    const runId = 'lost-decision';
    await clean.create(newState(runId), META);
    const lost = loseFirstResponse(clients.doc, 'UpdateItem');
    const decision = decisionFor(runId, 1, { rows: 10 });
    await store.recordDecision(runId, 1, decision);
    expect(lost.fired()).toBe(true);
    expect(lost.attempts).toHaveLength(2);
    expect(decodeState((await clean.load(runId))!).pending).toEqual(decision);
    // Only the retry of the same write counts as ours: another write for the step is still refused, even
    // of the very same bytes (another worker given the same answer in the same millisecond).
    await expect(store.recordDecision(runId, 1, decisionFor(runId, 1, { rows: 11 }))).rejects.toBeInstanceOf(StaleVersionError);
    await expect(store.recordDecision(runId, 1, decision)).rejects.toBeInstanceOf(StaleVersionError);
    await expect(clean.recordDecision(runId, 1, decision)).rejects.toBeInstanceOf(StaleVersionError);
    // The step's commit drops the decision and the write's token with it.
    const state = decodeState((await clean.load(runId))!);
    await clean.commit({ runId, expectedVersion: 1, state: completeStep(state, { ...recordFor(runId, 1), input: { rows: 10 } }, 9_000), appended: { ...recordFor(runId, 1), input: { rows: 10 } }, ...META });
    const { Item: head } = await resources!.clients.doc.send(new GetCommand({ TableName: resources!.tableName, Key: { [PK]: runPk(runId), [SK]: HEAD_SK } }));
    expect(Object.keys(head!).filter((k) => k.startsWith('pending'))).toEqual([]);
  });

  it('recordDecision of a decision large enough to be spilled to S3: the same, and the decision reads back whole', async () => {
    const { store, clean, clients } = await faultyStore('lost-spilled', { spillBytes: 1024 });
    const runId = 'lost-spilled';
    await clean.create(newState(runId), META);
    const lost = loseFirstResponse(clients.doc, 'UpdateItem', 'timeout');
    const decision = decisionFor(runId, 1, { payload: 'p'.repeat(5_000) });
    await store.recordDecision(runId, 1, decision);
    expect(lost.attempts).toHaveLength(2);
    expect(decodeState((await clean.load(runId))!).pending).toEqual(decision);
    await expect(store.recordDecision(runId, 1, decision)).rejects.toBeInstanceOf(StaleVersionError);
  });

  it('commit: DynamoDB Local honours the ClientRequestToken the SDK reuses on retry, so the transaction is applied once and succeeds', async () => {
    const { store, clean, clients } = await faultyStore('lost-commit');
    const runId = 'lost-commit';
    await clean.create(newState(runId), META);
    const lost = loseFirstResponse(clients.doc, 'TransactWriteItems', 'timeout');
    const written = await store.commit({ runId, expectedVersion: 1, state: stateAfter(runId, 1), appended: recordFor(runId, 1), ...META });
    expect(written.version).toBe(2);
    expect(lost.attempts).toHaveLength(2);
    const [first, retry] = lost.attempts;
    expect(typeof first!.ClientRequestToken).toBe('string');
    expect(retry!.ClientRequestToken).toBe(first!.ClientRequestToken);
    expect((await clean.history(runId)).map((h) => h.version)).toEqual([1, 2]);
    expect(decodeState((await clean.load(runId))!).steps).toEqual([recordFor(runId, 1)]);
  });

  it('create: the retried transaction answers as the first would have, created', async () => {
    const { store, clean, clients } = await faultyStore('lost-create');
    const runId = 'lost-create';
    const lost = loseFirstResponse(clients.doc, 'TransactWriteItems');
    expect(await store.create(newState(runId), META)).toMatchObject({ created: true, version: 1 });
    expect(lost.attempts).toHaveLength(2);
    expect(await store.create(newState(runId), META)).toMatchObject({ created: false, version: 1 });
    expect((await clean.history(runId)).map((h) => h.version)).toEqual([1]);
  });
});
