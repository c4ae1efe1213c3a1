import { afterEach, describe, expect, it } from 'vitest';
import { createEventHandler } from '../../lib/aws/event-handler.ts';
import { createSqsWorkerHandler } from '../../lib/aws/sqs-worker-handler.ts';
import { createLogger } from '../../lib/log.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { receiveOneRecord, sqsEvent } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/**
 * The Lambda functions' log lines as a collector reads them: JSON objects whose every key appears once.
 * The handlers bind the worker id (and the event id) for the lines that do not name it; the engine's lines
 * that name it themselves (every checkpoint) wrote it twice, which collectors that check keys refuse.
 */

let resources: TestResources | undefined;
afterEach(() => resources?.close());

function rawLines() {
  const lines: string[] = [];
  const log = createLogger({ service: 'stepwise-worker', agent: 'rows' }, { format: 'json', env: {}, write: (line) => { lines.push(line); } });
  return { log, lines };
}

const times = (line: string, key: string) => line.split(`"${key}":`).length - 1;

describe('the Lambda functions\' log lines', () => {
  it('name the worker once on every line of a step, the checkpoint line among them', { timeout: 60_000 }, async () => {
    resources = await createTestResources('log-lines');
    const agent = writeRowsAgent(new FakeDatabase());
    const runId = await startTestRun(resources.runtime(), agent, 'log-lines-1');
    const record = await receiveOneRecord(resources);
    const { log, lines } = rawLines();
    const handler = createSqsWorkerHandler({ runtime: resources.runtime(), agent, model: new ScriptedModel({ steps: 2 }), log, codeVersion: 'test' });
    expect(await handler(sqsEvent([record]), { awsRequestId: 'request-1' } as never)).toEqual({ batchItemFailures: [] });
    const checkpoint = lines.find((l) => l.includes('"event":"checkpoint"'));
    expect(checkpoint).toBeDefined();
    expect(JSON.parse(checkpoint!)).toMatchObject({ runId, step: 1, version: 2, workerId: 'request-1' });
    for (const line of lines) expect(times(line, 'workerId'), line).toBe(1);
  });

  it('name the event once on the events function\'s own lines', async () => {
    const { log, lines } = rawLines();
    const agent = writeRowsAgent(new FakeDatabase());
    const handler = createEventHandler({ runtime: {} as never, events: {} as never, agent, log, codeVersion: 'test' });
    const event = { version: '0', id: 'event-1', 'detail-type': 'order.paid', source: 'shop', account: '000000000000', time: new Date().toISOString(), region: 'us-east-1', resources: [], detail: {} };
    expect(await handler(event, { awsRequestId: 'request-2' })).toEqual({ started: [], resumed: [] });
    const unmatched = lines.find((l) => l.includes('"event":"event-unmatched"'));
    expect(unmatched).toBeDefined();
    expect(JSON.parse(unmatched!)).toMatchObject({ eventId: 'event-1', workerId: 'request-2' });
    expect(times(unmatched!, 'eventId'), unmatched).toBe(1);
    expect(times(unmatched!, 'workerId'), unmatched).toBe(1);
  });
});
