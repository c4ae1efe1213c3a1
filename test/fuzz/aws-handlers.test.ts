import { randomUUID } from 'node:crypto';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import fc from 'fast-check';
import type { APIGatewayProxyEventV2, APIGatewayProxyResult, EventBridgeEvent } from 'aws-lambda';
import { handle } from 'hono/aws-lambda';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defineAgent } from '../../lib/agent.ts';
import { DynamoEventBuffer } from '../../lib/aws/dynamo-event-buffer.ts';
import { createEventHandler } from '../../lib/aws/event-handler.ts';
import { NOT_BEFORE_ATTRIBUTE } from '../../lib/aws/sqs-delay.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { runIdForEvent } from '../../lib/engine/start-from-event.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { silentLogger } from '../../lib/log.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from '../aws/aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from '../aws/lambda-harness.ts';
import { captureLogs } from '../aws/log-capture.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from '../aws/write-rows-agent.ts';
import { fuzzRuns } from '../support/fuzz-runs.ts';

/**
 * The AWS entry points fed arbitrary input, on DynamoDB Local and fauxqs: the worker Lambda's queue
 * messages (bodies and the retry-delay attribute, which any sender to the queue controls), the events
 * Lambda's EventBridge events, and the API Lambda's API Gateway requests. Never a throw (Lambda would
 * retry it, or API Gateway answer 502), always a clear outcome, and no stored run changed by bad input.
 */
let resources: TestResources;
const db = new FakeDatabase();
const model = new ScriptedModel({ steps: 1 });
const agent = defineAgent({
  ...writeRowsAgent(db),
  // An agent's own functions get whatever an event holds: they may throw on a detail they do not expect.
  startOn: [{ source: 'aws.s3', detailType: 'Object Created', goal: (e) => `Process ${(e.detail as { object: { key: string } }).object.key.toUpperCase()}` }],
  eventKey: (e) => (e.detailType === 'Order Paid' ? { type: 'order.paid', key: (e.detail as { order: { id: string } }).order.id } : undefined),
});
const DONE = 'fuzz-done';

beforeAll(async () => {
  resources = await createTestResources('fuzz-aws');
  await startTestRun(resources.runtime(), agent, DONE);
  await driveRun({ resources, runId: DONE, spawn: () => new WorkerProcess({ resources, agent, model }) });
});
afterAll(() => resources?.close());

const snapshot = async (runId: string) => {
  const { store } = resources.runtime();
  return { stored: await store.load(runId), history: await store.history(runId) };
};

/** The characters fauxqs accepts in a body (SQS's XML characters, less those beyond U+FFFF). */
const SQS_TEXT = /^[\t\n\r\u0020-\ud7ff\ue000-\ufffd]+$/;
/** What a sender might put in a message body. */
const body = fc.oneof(
  fc.string({ maxLength: 200, unit: 'grapheme' }),
  fc.json({ maxDepth: 3 }),
  fc.record({
    runId: fc.oneof(fc.constantFrom(DONE, 'no-such-run', '', '../x'), fc.string({ maxLength: 20 }), fc.integer()),
    version: fc.oneof(fc.integer({ min: -2, max: 10 }), fc.double(), fc.string({ maxLength: 5 }), fc.constant(null)),
  }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
).filter((text) => SQS_TEXT.test(text));
/** The retry-delay attribute: a time in ms, or anything another sender wrote there. */
const notBefore = fc.option(fc.oneof(
  fc.integer().map(String),
  fc.constantFrom('NaN', 'Infinity', '-1', '1e400', '0x10', ' ', String(Date.now() + 3_600_000)),
  fc.string({ minLength: 1, maxLength: 12 }).filter((s) => /^[\x20-\x7e]+$/.test(s)),
), { nil: undefined });

describe('fuzzing the AWS entry points', () => {
  it('worker Lambda: any message on the queue is done or comes back later, never a throw; no run changes and the model is never asked', async () => {
    const before = await snapshot(DONE);
    const calls = model.calls.length;
    const { log, lines } = captureLogs();
    const w = new WorkerProcess({ resources, agent, model, log });
    let hidden = 0;
    let malformed = 0;
    try {
      await fc.assert(fc.asyncProperty(body, notBefore, async (text, delay) => {
        await resources.clients.sqs.send(new SendMessageCommand({
          QueueUrl: resources.queueUrl, MessageBody: text, MessageGroupId: `fuzz-${randomUUID()}`, MessageDeduplicationId: randomUUID(),
          ...(delay !== undefined ? { MessageAttributes: { [NOT_BEFORE_ATTRIBUTE]: { DataType: 'String', StringValue: delay } } } : {}),
        }));
        // pollOnce rethrows anything the handler throws; it is the Lambda event source's view.
        const result = await pollOnce(resources.clients, resources.queueUrl, w, { waitSeconds: 1 });
        expect(result.records).toHaveLength(1);
        const due = Number(delay);
        const later = Number.isFinite(due) && due > Date.now() + 1000;
        // Only a retry delay still to come holds a message back (hidden until then); anything else is done.
        expect(result.failures).toHaveLength(later ? 1 : 0);
        if (later) hidden++;
        else if (!isRunMessage(text)) malformed++;
      }), fuzzRuns(60));
    } finally {
      w.close();
    }
    expect(await snapshot(DONE)).toEqual(before);
    expect(model.calls.length).toBe(calls);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(hidden);
    // Each message that is no run message was dropped with its content logged, for whoever sent it; none
    // of them was an error of the handler's own.
    expect(lines.filter((l) => l.event === 'malformed-message')).toHaveLength(malformed);
    expect(lines.filter((l) => l.event === 'delivery-error')).toEqual([]);
  });

  it('events Lambda: any EventBridge event starts at most its trigger\'s run, and once; an agent function that throws on it is logged, never thrown', async () => {
    const { log, lines } = captureLogs();
    const runtime = resources.runtime();
    const events = new DynamoEventBuffer({ doc: runtime.clients.doc, tableName: resources.tableName, blobs: runtime.blobs });
    const handler = createEventHandler({ runtime, events, agent, log, codeVersion: 'test' });
    const detail = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record({ object: fc.oneof(fc.record({ key: fc.oneof(fc.string({ maxLength: 30 }), fc.integer()) }, { requiredKeys: [] }), fc.jsonValue({ maxDepth: 1 })) }, { requiredKeys: [] }),
      fc.record({ order: fc.oneof(fc.record({ id: fc.oneof(fc.string({ maxLength: 30 }), fc.integer()) }, { requiredKeys: [] }), fc.jsonValue({ maxDepth: 1 })), key: fc.string({ maxLength: 20 }) }, { requiredKeys: [] }),
    );
    const event = fc.record({
      id: fc.uuid(),
      source: fc.oneof(fc.constantFrom('aws.s3', 'shop', ''), fc.string({ maxLength: 20 })),
      'detail-type': fc.oneof(fc.constantFrom('Object Created', 'Order Paid', ''), fc.string({ maxLength: 20 })),
      detail,
    }).map((e): EventBridgeEvent<string, unknown> => ({ version: '0', account: '000000000000', time: new Date().toISOString(), region: 'us-east-1', resources: [], ...e }));
    let triggerErrors = 0;
    await fc.assert(fc.asyncProperty(event, async (e) => {
      const key = (e.detail as { object?: { key?: unknown } } | null)?.object?.key;
      const starts = e.source === 'aws.s3' && e['detail-type'] === 'Object Created' && typeof key === 'string';
      if (e.source === 'aws.s3' && e['detail-type'] === 'Object Created' && !starts) triggerErrors++;
      const first = await handler(e, { awsRequestId: randomUUID() });
      expect(first).toEqual({ started: starts ? [{ runId: runIdForEvent(agent.name, e, 0), created: true }] : [], resumed: [] });
      if (starts) {
        expect(decodeState((await runtime.store.load(runIdForEvent(agent.name, e, 0)))!).goal).toBe(`Process ${(key as string).toUpperCase()}`);
        // EventBridge delivers at least once: the same event again starts nothing new.
        expect(await handler(e, { awsRequestId: randomUUID() })).toEqual({ started: [{ runId: runIdForEvent(agent.name, e, 0), created: false }], resumed: [] });
      }
    }), fuzzRuns(80));
    expect(lines.filter((l) => l.event === 'trigger-error')).toHaveLength(triggerErrors);
    expect(lines.filter((l) => l.event === 'event-key-error').length).toBeGreaterThan(0);
  });

  it('API Lambda: any API Gateway request gets a 2xx or a 4xx with a reason, never a throw or a 5xx; no run changes', async () => {
    const before = await snapshot(DONE);
    const runtime = resources.runtime();
    const app = createHttpApp({
      store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: { now: () => Date.now() }, workerId: 'api', codeVersion: 'test',
      log: silentLogger, agent, signingKey: async () => Buffer.alloc(32, 7),
    });
    // hono's adapter refuses a request it cannot build (a GET or HEAD with a body) with a 400, and says so
    // on the console: kept here, and checked to be only that.
    const refused = vi.spyOn(console, 'error').mockImplementation(() => {});
    const lambda = handle(app) as unknown as (event: APIGatewayProxyEventV2, context: unknown) => Promise<APIGatewayProxyResult>;
    const segment = fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom(DONE, '..', '%2e%2e', '%00', '%zz', '%', ' ', '\u00e9', 'x'.repeat(600)));
    const path = fc.oneof(
      segment.map((s) => `/runs/${s}`),
      segment.map((s) => `/runs/${encodeURIComponent(s)}/history`),
      fc.tuple(segment, segment).map(([r, t]) => `/runs/${r}/waits/${t}`),
      segment.map((s) => `/approvals/${s}`),
      fc.constantFrom('/runs', '/events', '/health', '/', '//runs', '/runs/', `/runs/${DONE}/cancel`, `/runs/${DONE}/fork`),
    );
    const request = fc.record({
      method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD'),
      path,
      query: fc.oneof(fc.constant(''), fc.string({ maxLength: 30 }), fc.constantFrom('limit=-1', 'status=nope', 'limit=99999999999', 'a=%zz')),
      contentType: fc.constantFrom('application/json', 'application/x-www-form-urlencoded', 'text/plain', 'multipart/form-data; boundary=x', ''),
      body: fc.option(fc.oneof(fc.json({ maxDepth: 3 }), fc.string({ maxLength: 200 }), fc.constantFrom('{"goal":""}', 'decision=approve', '{"goal":"g","runId":"../x"}')), { nil: undefined }),
      base64: fc.boolean(),
    // The one request that changes the run, as it should: DELETE /runs/:id deletes an ended run (test/http/operate-api.test.ts).
    }).filter((r) => !(r.method === 'DELETE' && r.path === `/runs/${DONE}`));
    await fc.assert(fc.asyncProperty(request, async (r) => {
      const encoded = r.body === undefined ? undefined : r.base64 ? Buffer.from(r.body).toString('base64') : r.body;
      const response = await lambda(apiEvent(r.method, r.path, r.query, r.contentType, encoded, r.base64), { awsRequestId: randomUUID() });
      expect(response.statusCode, `${r.method} ${r.path}?${r.query} ${r.body?.slice(0, 100)} -> ${response.body?.slice(0, 200)}`).toBeLessThan(500);
      if (response.statusCode >= 400 && r.method !== 'HEAD' && /json/.test(String(response.headers?.['content-type'] ?? ''))) expect(JSON.parse(response.body).error).toEqual(expect.any(String));
    }), fuzzRuns(150));
    expect(refused.mock.calls.every(([message]) => message === 'Error processing request:')).toBe(true);
    refused.mockRestore();
    expect(await snapshot(DONE)).toEqual(before);
  });
});

/** A run message as the worker reads one, judged here on its own: exactly a run id and a positive whole version (a safe integer). */
function isRunMessage(text: string): boolean {
  try {
    const value = JSON.parse(text) as Record<string, unknown>;
    return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).sort().join() === 'runId,version'
      && typeof value.runId === 'string' && value.runId.length > 0 && Number.isSafeInteger(value.version) && (value.version as number) > 0;
  } catch {
    return false;
  }
}

/** An API Gateway HTTP API (payload 2.0) request, as the gateway hands it to the Lambda. */
function apiEvent(method: string, path: string, query: string, contentType: string, body: string | undefined, isBase64Encoded: boolean): APIGatewayProxyEventV2 {
  return {
    version: '2.0', routeKey: '$default', rawPath: path, rawQueryString: query,
    headers: { host: 'api.example.test', ...(contentType ? { 'content-type': contentType } : {}) },
    requestContext: {
      accountId: '000000000000', apiId: 'api', domainName: 'api.example.test', domainPrefix: 'api', requestId: randomUUID(), routeKey: '$default',
      stage: '$default', time: new Date().toISOString(), timeEpoch: Date.now(),
      http: { method, path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'fuzz' },
    },
    isBase64Encoded,
    ...(body !== undefined ? { body } : {}),
  };
}
