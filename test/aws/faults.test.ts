import { ProvisionedThroughputExceededException } from '@aws-sdk/client-dynamodb';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { stepSk } from '../../lib/aws/table-layout.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce, type PollResult } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/**
 * Faults a local server cannot be made to produce on cue, injected with aws-sdk-client-mock into one
 * worker's client at one exact call; every other call goes through to DynamoDB Local, fauxqs or S3.
 */

type Command = { constructor: { name: string }; input: object };

/** Makes the first call that `matches` fail with `error`; everything else goes to the real server. */
function failOnce(client: { send: (command: never) => Promise<unknown> }, matches: (command: Command) => boolean, error: () => Error): { fired: () => boolean } {
  const real = client.send.bind(client) as (command: Command) => Promise<unknown>;
  let fired = false;
  const stub = mockClient(client as never);
  stub.send.callsFake(async (command: Command): Promise<never> => {
    if (!fired && matches(command)) {
      fired = true;
      throw error();
    }
    return real(command) as Promise<never>;
  });
  return { fired: () => fired };
}

const commitOf = (step: number) => (command: Command) =>
  command.constructor.name === 'TransactWriteCommand'
  && JSON.stringify(command.input).includes(`"sk":"${stepSk(step)}"`);

let resources: TestResources | undefined;
afterEach(() => resources?.close());

async function runWithFault(label: string, inject: (worker: WorkerProcess) => { fired: () => boolean }, outputBytes?: (step: number) => number) {
  resources = await createTestResources(label);
  const db = new FakeDatabase();
  const agent = writeRowsAgent(db, outputBytes ? { outputBytes } : {});
  const model = new ScriptedModel({ steps: 3 });
  const runtime = resources.runtime();
  const runId = await startTestRun(runtime, agent, `${label}-run`);
  const worker = new WorkerProcess({ resources, agent, model });
  const fault = inject(worker);
  const polls: PollResult[] = [];
  try {
    while (!fault.fired() && polls.length < 10) polls.push(await pollOnce(resources.clients, resources.queueUrl, worker));
  } finally {
    worker.close();
  }
  expect(fault.fired()).toBe(true);
  const failed = polls.at(-1)!;
  await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }), poll: { waitSeconds: 2 } });
  const state = decodeState((await runtime.store.load(runId))!);
  return { db, model, runtime, runId, failed, state };
}

async function expectCompletedOnce(result: Awaited<ReturnType<typeof runWithFault>>): Promise<void> {
  const { db, runtime, runId, state } = result;
  expect(state.status).toBe('completed');
  expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3]);
  for (let n = 1; n <= 3; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
  const history = await runtime.store.history(runId);
  expect(history.map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
  // Infrastructure faults are not the step's failures: none is recorded.
  expect(state.failures).toBe(0);
}

describe('faults only a mock can produce on cue', () => {
  it('throttling on the step 2 commit: the message is retried, the step commits once, its effect applied once', async () => {
    const result = await runWithFault('throttle', (worker) => failOnce(worker.clients.doc as never, commitOf(2), () => new ProvisionedThroughputExceededException({
      message: 'The level of configured provisioned throughput for the table was exceeded', $metadata: { httpStatusCode: 400 },
    })));
    expect(result.failed.failures).toHaveLength(1);
    await expectCompletedOnce(result);
    // The retry ran the recorded call again (the ledger returned its result) without asking the model.
    expect(result.db.receivedCount(idempotencyKey(result.runId, 2))).toBe(2);
    expect(result.model.callsFor(2)).toBe(1);
  });

  it('an S3 500 on the upload of step 2\'s large output: retried, then the output is readable', async () => {
    const result = await runWithFault('s3-500', (worker) => failOnce(worker.clients.s3 as never, (c) => c.constructor.name === 'PutObjectCommand', () => new S3ServiceException({
      name: 'InternalError', $fault: 'server', message: 'We encountered an internal error. Please try again.', $metadata: { httpStatusCode: 500 },
    })), (step) => (step === 2 ? 50_000 : 0));
    expect(result.failed.failures).toHaveLength(1);
    await expectCompletedOnce(result);
    const ref = result.state.steps[1]!.result.ref!;
    expect((await result.runtime.blobs.get(ref))?.length).toBe(result.state.steps[1]!.result.bytes);
  });

  it('a timeout sending the next step after step 1\'s checkpoint: the redelivery re-drives the run, nothing repeats', async () => {
    const result = await runWithFault('sqs-timeout', (worker) => failOnce(worker.clients.sqs as never, (c) => c.constructor.name === 'SendMessageCommand', () => Object.assign(
      new Error('Connection timed out after 10000 ms'), { name: 'TimeoutError' },
    )));
    expect(result.failed.failures).toHaveLength(1);
    await expectCompletedOnce(result);
    expect(result.model.calls).toEqual([1, 2, 3, 4]);
  });

  it('a timeout loading the run: the message comes back and the step runs once', async () => {
    const result = await runWithFault('ddb-timeout', (worker) => failOnce(worker.clients.doc as never, (c) => c.constructor.name === 'QueryCommand', () => Object.assign(
      new Error('socket hang up'), { name: 'TimeoutError' },
    )));
    expect(result.failed.failures).toHaveLength(1);
    await expectCompletedOnce(result);
    expect(result.model.calls).toEqual([1, 2, 3, 4]);
  });
});

describe('transaction conflicts', () => {
  it('retries a commit cancelled by a conflicting transaction instead of calling it stale', async () => {
    resources = await createTestResources('conflict');
    const store = resources.runtime().store;
    const runId = 'conflict-run';
    await store.create(newState(runId), META);
    const conflict = failOnce(resources.clients.doc as never, (c) => c.constructor.name === TransactWriteCommand.name, () => Object.assign(
      new Error('Transaction cancelled, please refer cancellation reasons for specific reasons [None, None, TransactionConflict]'),
      { name: 'TransactionCanceledException', CancellationReasons: [{ Code: 'None' }, { Code: 'None' }, { Code: 'TransactionConflict' }] },
    ));
    const written = await store.commit({ runId, expectedVersion: 1, state: stateAfter(runId, 1), appended: recordFor(runId, 1), ...META });
    expect(conflict.fired()).toBe(true);
    expect(written.version).toBe(2);
    expect(decodeState((await store.load(runId))!).steps).toHaveLength(1);
  });
});
