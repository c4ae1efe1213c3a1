import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { TransientError } from '../../lib/core/errors.ts';
import type { Model, ModelRequest } from '../../lib/ports.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, sqsEvent, toSqsRecord } from './lambda-harness.ts';
import { FakeDatabase, writeRowsAgent } from './write-rows-agent.ts';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';

let resources: TestResources | undefined;
let worker: WorkerProcess | undefined;
afterEach(() => { worker?.close(); resources?.close(); });

/** A model that never answers on its own, like one stuck obeying a long retry-after: it ends only when aborted. */
class HangingModel implements Model {
  readonly name = 'hanging';
  signals: (AbortSignal | undefined)[] = [];
  decide(request: ModelRequest): Promise<never> {
    this.signals.push(request.signal);
    return new Promise((_, reject) => {
      if (!request.signal) return; // without a deadline this would hang the invocation until Lambda kills it
      request.signal.addEventListener('abort', () => reject(new TransientError('model call aborted: the invocation is about to time out')));
    });
  }
}

describe('the Lambda deadline', () => {
  it('aborts the model call before the invocation times out, and records the failed attempt', async () => {
    resources = await createTestResources('deadline');
    const agent = writeRowsAgent(new FakeDatabase());
    const model = new HangingModel();
    worker = new WorkerProcess({ resources, agent, model });
    const runId = await startTestRun(resources.runtime(), agent, 'deadline-run');
    const { Messages } = await resources.clients.sqs.send(new ReceiveMessageCommand({
      QueueUrl: resources.queueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 1, MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
    }));
    // 16 s left and 15 s kept in reserve: the model gets about one second.
    const response = await worker.handler(sqsEvent([toSqsRecord(Messages![0]!, resources.queueUrl)]), {
      awsRequestId: 'req-deadline', getRemainingTimeInMillis: () => 16_000,
    });
    expect(response.batchItemFailures).toEqual([]);
    expect(model.signals[0]).toBeInstanceOf(AbortSignal);
    const state = decodeState((await resources.runtime().store.load(runId))!);
    expect(state).toMatchObject({ status: 'running', step: 0, failures: 1, lastError: 'model call aborted: the invocation is about to time out' });
  });
});
