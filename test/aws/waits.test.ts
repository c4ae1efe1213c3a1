import { randomBytes, randomUUID } from 'node:crypto';
import { SESv2Client } from '@aws-sdk/client-sesv2';
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { APIGatewayProxyEventV2, APIGatewayProxyResult, EventBridgeEvent } from 'aws-lambda';
import { handle } from 'hono/aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import { z } from 'zod';
import { promptText } from '../../lib/core/prompt.ts';
import { DynamoEventBuffer } from '../../lib/aws/dynamo-event-buffer.ts';
import { createEventHandler } from '../../lib/aws/event-handler.ts';
import type { AwsRuntime } from '../../lib/aws/runtime.ts';
import { SesNotifier } from '../../lib/aws/ses-notifier.ts';
import { SQS_MAX_TIMER_MS } from '../../lib/aws/wait-services.ts';
import { HEAD_SK, PK, SK, runPk } from '../../lib/aws/table-layout.ts';
import { decodeState } from '../../lib/core/codec.ts';
import type { RunState } from '../../lib/core/state.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { silentLogger } from '../../lib/log.ts';
import type { IncomingEvent } from '../../lib/core/waits.ts';
import { captureLogs } from './log-capture.ts';
import type { Model, ModelReply } from '../../lib/ports.ts';
import { sendDueTimers } from '../../lib/waits/timers.ts';
import { requestApproval } from '../../lib/waits/tools.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { startSesServer } from '../support/ses-server.ts';
import { APPROVER, ApprovalFlowModel, OneWaitModel, waitAgent } from '../support/wait-agent.ts';
import { createTestResources, queueDepth, receiveAll, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, pollOnce } from './lambda-harness.ts';

let resources: TestResources;
let ses: Awaited<ReturnType<typeof startSesServer>>;
const key = randomBytes(32);
const signingKey = async () => key;
const PUBLIC_URL = 'https://api.example.test';

beforeAll(async () => {
  [resources, ses] = await Promise.all([createTestResources('waits'), startSesServer()]);
});
afterAll(async () => {
  resources?.close();
  await ses?.stop();
});

const sesClient = () => new SESv2Client({ endpoint: ses.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'y' } });
const events = (runtime: AwsRuntime) => new DynamoEventBuffer({ doc: runtime.clients.doc, tableName: resources.tableName, blobs: runtime.blobs });
const waitsOf = (runtime: AwsRuntime) => ({
  notifier: new SesNotifier({ ses: sesClient(), from: 'approvals@example.com' }), signingKey, publicUrl: PUBLIC_URL,
  events: events(runtime), maxTimerMs: SQS_MAX_TIMER_MS,
});

function container(model: Model, options: { clock?: { now(): number }; dropped?: string[] } = {}): WorkerProcess {
  return new WorkerProcess({ resources, agent: waitAgent(new FakeRows(), options.dropped ?? []), model, waits: waitsOf, ...(options.clock ? { clock: options.clock } : {}) });
}

async function state(runId: string): Promise<RunState> {
  return decodeState((await resources.runtime().store.load(runId))!);
}

/** Lambda's event source, until the run is in one of the statuses (or the polls run out). */
async function pollUntil(worker: WorkerProcess, runId: string, statuses: string[], polls = 30): Promise<RunState> {
  for (let i = 0; i < polls; i++) {
    const current = await state(runId);
    if (statuses.includes(current.status)) return current;
    await pollOnce(resources.clients, resources.queueUrl, worker, { waitSeconds: 1 });
  }
  throw new Error(`run ${runId} is ${(await state(runId)).status} after ${polls} polls`);
}

/** An API Gateway HTTP API (payload 2.0) request. */
function apiEvent(method: string, path: string, body?: string, headers: Record<string, string> = {}): APIGatewayProxyEventV2 {
  return {
    version: '2.0', routeKey: '$default', rawPath: path, rawQueryString: '', headers: { host: 'api.example.test', ...headers },
    requestContext: {
      accountId: '000000000000', apiId: 'api', domainName: 'api.example.test', domainPrefix: 'api', requestId: randomUUID(), routeKey: '$default',
      stage: '$default', time: new Date().toISOString(), timeEpoch: Date.now(),
      http: { method, path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' },
    },
    ...(body !== undefined ? { body, isBase64Encoded: false } : { isBase64Encoded: false }),
  };
}

function apiHandler(options: { agent?: AgentDefinition; agentQueue?: boolean } = {}) {
  const runtime = resources.runtime();
  const app = createHttpApp({
    store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: { now: () => Date.now() }, workerId: 'api', codeVersion: 'test',
    log: silentLogger, agent: options.agent ?? waitAgent(new FakeRows(), []), signingKey, events: events(runtime), ...(options.agentQueue ? { agentQueue: true } : {}),
  });
  const lambda = handle(app) as unknown as (event: APIGatewayProxyEventV2, context: unknown) => Promise<APIGatewayProxyResult>;
  return (event: APIGatewayProxyEventV2) => lambda(event, { awsRequestId: randomUUID() });
}

function eventBridge(detailType: string, detail: unknown, id = randomUUID(), source = 'shop'): EventBridgeEvent<string, unknown> {
  return { version: '0', id, 'detail-type': detailType, source, account: '000000000000', time: new Date().toISOString(), region: 'us-east-1', resources: [], detail };
}

describe('waits on the AWS runtime (DynamoDB Local, fauxqs, a local SES v2 stand-in)', () => {
  it('approval by email through API Gateway: GET shows, POST decides once, another container finishes', { timeout: 120_000 }, async () => {
    const dropped: string[] = [];
    const a = container(new ApprovalFlowModel(), { dropped });
    const runId = `aws-approve-${randomUUID().slice(0, 6)}`;
    await startTestRun(a.runtime, a.runtime && waitAgent(new FakeRows(), []), runId, 'copy, then drop old_rows with approval');
    const waiting = await pollUntil(a, runId, ['waiting']);
    a.close();
    expect(waiting.wait).toMatchObject({ kind: 'approval', approvers: [APPROVER] });
    // Nothing of a waiting run sits in the queue: its deadline is an hour away, past what SQS holds.
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    const emails = ses.sent.filter((e) => e.text.includes(`Run: ${runId} `));
    expect(emails).toHaveLength(1);
    expect(emails[0]).toMatchObject({ from: 'approvals@example.com', to: [APPROVER] });
    const link = /Review and decide: (\S+)/.exec(emails[0]!.text)![1]!;
    expect(link.startsWith(`${PUBLIC_URL}/approvals/v1.`)).toBe(true);
    const path = new URL(link).pathname;

    const api = apiHandler();
    const page = await api(apiEvent('GET', path));
    expect(page.statusCode).toBe(200);
    expect(page.headers?.['referrer-policy']).toBe('no-referrer');
    expect(page.body).toContain('value="approve"');
    expect((await state(runId)).status).toBe('waiting');
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const decided = await api(apiEvent('POST', path, 'decision=approve&comment=from+the+email', form));
    expect(decided.statusCode).toBe(200);
    expect(decided.body).toContain('Approved. The run continues.');
    const again = await api(apiEvent('POST', path, 'decision=reject', form));
    expect(again.statusCode).toBe(409);
    // A forged token changes nothing.
    expect((await api(apiEvent('POST', `${path.slice(0, -3)}AAA`, 'decision=reject', form))).statusCode).toBe(403);

    const b = container(new ApprovalFlowModel(), { dropped });
    const done = await pollUntil(b, runId, ['completed', 'failed']);
    b.close();
    expect(done).toMatchObject({ status: 'completed', summary: 'Copied and dropped old_rows.' });
    expect(done.steps[1]!.result.text).toContain('"comment":"from the email"');
    expect(dropped).toEqual([`${runId}/step-3:old_rows`]);
  });

  it('a tool with approval: the engine asks for the call, and the approval runs that call at the next step, the model not asked', { timeout: 120_000 }, async () => {
    const dropped: string[] = [];
    const asked: number[] = [];
    const agent = defineAgent({
      name: 'gated-aws',
      tools: [tool({
        name: 'drop_table', description: 'Drop a table', input: z.object({ table: z.string() }), sideEffect: true, approval: { approvers: [APPROVER] },
        run: async ({ table }, ctx) => ctx.once(() => { dropped.push(`${ctx.idempotencyKey}:${table}`); return { dropped: table }; }),
      })],
    });
    // Drops old_rows at step 1; asked later, it would drop everything; DONE once a drop ran.
    const model: Model = {
      name: 'talked-round',
      async decide(request): Promise<ModelReply> {
        asked.push(request.step);
        if (promptText(request.prompt).includes('-> ok: {"dropped"')) return { kind: 'done', summary: 'dropped' };
        return { kind: 'tool', tool: 'drop_table', input: { table: request.step === 1 ? 'old_rows' : 'everything' } };
      },
    };
    const worker = () => new WorkerProcess({ resources, agent, model, waits: waitsOf });
    const runId = `aws-gate-${randomUUID().slice(0, 6)}`;
    await startTestRun(resources.runtime(), agent, runId, 'drop old_rows');
    const a = worker();
    const waiting = await pollUntil(a, runId, ['waiting']);
    a.close();
    expect(waiting.wait).toMatchObject({ kind: 'approval', step: 1, tool: 'drop_table', input: { table: 'old_rows' }, approvers: [APPROVER] });
    expect(dropped).toEqual([]);
    const email = ses.sent.find((e) => e.text.includes(`Run: ${runId} `));
    expect(email?.text).toContain('Run drop_table (Drop a table) with these arguments: { "table": "old_rows" }');

    const path = new URL(/Review and decide: (\S+)/.exec(email!.text)![1]!).pathname;
    const decided = await apiHandler({ agent })(apiEvent('POST', path, 'decision=approve', { 'content-type': 'application/x-www-form-urlencoded' }));
    expect(decided.statusCode).toBe(200);
    const b = worker();
    const done = await pollUntil(b, runId, ['completed', 'failed']);
    b.close();
    expect(done).toMatchObject({ status: 'completed', step: 2 });
    expect(done.steps[1]).toMatchObject({ tool: 'drop_table', input: { table: 'old_rows' }, idempotencyKey: `${runId}/step-2` });
    expect(dropped).toEqual([`${runId}/step-2:old_rows`]);
    expect(asked).toEqual([1, 3]);
  });

  it('an approver whose address SES refuses keeps no other approver from their email; the failure names the run and the approver', { timeout: 120_000 }, async () => {
    const unverified = `unverified-${randomUUID().slice(0, 6)}@example.com`;
    ses.reject(unverified);
    const base = waitAgent(new FakeRows(), []);
    const agent = defineAgent({ ...base, tools: base.tools.map((t) => (t.name === 'request_approval' ? requestApproval({ approvers: [unverified, APPROVER], timeoutMs: 3_600_000 }) : t)) });
    const { log, lines } = captureLogs();
    const a = new WorkerProcess({ resources, agent, model: new ApprovalFlowModel(), waits: waitsOf, log });
    const runId = `aws-refused-${randomUUID().slice(0, 6)}`;
    await startTestRun(a.runtime, agent, runId, 'copy, then drop old_rows with approval');
    const waiting = await pollUntil(a, runId, ['waiting']);
    const emails = () => ses.sent.filter((e) => e.text.includes(`Run: ${runId} `));
    expect(emails().map((e) => e.to)).toEqual([[APPROVER]]);
    const failed = () => lines.filter((l) => l.event === 'approval-email-failed');
    expect(failed().map((l) => [l.runId, l.waitId, l.approver])).toEqual([[runId, waiting.wait!.id, unverified]]);
    expect(failed()[0]!.error).toContain('Email address is not verified');
    // The delivery is retried for the refused one; the other approver's email is not sent again.
    for (let i = 0; i < 10 && failed().length < 2; i++) await pollOnce(resources.clients, resources.queueUrl, a, { waitSeconds: 2 });
    expect(failed()).toHaveLength(2);
    expect(emails().map((e) => e.to)).toEqual([[APPROVER]]);
    // And its link decides.
    const path = new URL(/Review and decide: (\S+)/.exec(emails()[0]!.text)![1]!).pathname;
    const decided = await apiHandler({ agent })(apiEvent('POST', path, 'decision=approve', { 'content-type': 'application/x-www-form-urlencoded' }));
    expect(decided.statusCode).toBe(200);
    expect((await pollUntil(a, runId, ['completed', 'failed'])).status).toBe('completed');
    a.close();
  });

  it('an EventBridge event resumes the run waiting for it; a redelivery and another key do nothing', { timeout: 120_000 }, async () => {
    const runId = `aws-event-${randomUUID().slice(0, 6)}`;
    const key = `order-${randomUUID().slice(0, 6)}`;
    const first: ModelReply = { kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } };
    const a = container(new OneWaitModel(first));
    await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    await pollUntil(a, runId, ['waiting']);
    const handler = createEventHandler({ runtime: a.runtime, events: events(a.runtime), agent: waitAgent(new FakeRows(), []), log: silentLogger, codeVersion: 'test' });
    expect(await handler(eventBridge('order.paid', { key: `${key}-other` }), { awsRequestId: 'e1' })).toEqual({ started: [], resumed: [] });
    const event = eventBridge('order.paid', { key, amount: 5 });
    expect(await handler(event, { awsRequestId: 'e2' })).toEqual({ started: [], resumed: [runId] });
    expect(await handler(event, { awsRequestId: 'e3' })).toEqual({ started: [], resumed: [] });
    const done = await pollUntil(a, runId, ['completed', 'failed']);
    a.close();
    expect(done.status).toBe('completed');
    expect(done.summary).toContain(`"id":"${event.id}"`);
  });

  it('an event whose resume SQS refused to send is sent again by its redelivery, where the run waited for the sweeper', { timeout: 120_000 }, async () => {
    const runId = `aws-event-refused-${randomUUID().slice(0, 6)}`;
    const key = `order-${randomUUID().slice(0, 6)}`;
    const a = container(new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } }));
    await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    await pollUntil(a, runId, ['waiting']);
    // The resume's send is refused once (throttled past the SDK's retries): the answer is written, its message is not.
    let refuse = true;
    const queue = Object.create(a.runtime.queue) as typeof a.runtime.queue;
    queue.send = async (message, options) => {
      if (refuse) { refuse = false; throw Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }); }
      return a.runtime.queue.send(message, options);
    };
    const handler = createEventHandler({ runtime: { ...a.runtime, queue }, events: events(a.runtime), agent: waitAgent(new FakeRows(), []), log: silentLogger, codeVersion: 'test' });
    const event = eventBridge('order.paid', { key });
    // The wait's timer (its deadline is within what SQS holds) is in the queue already.
    const before = await queueDepth(resources.clients, resources.queueUrl);
    // Thrown, so that EventBridge delivers the event again.
    await expect(handler(event, { awsRequestId: 'r1' })).rejects.toThrow('Rate exceeded');
    expect((await state(runId)).status).toBe('running');
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(before);
    // The redelivery finds the run it answered (its wait's entry stays until its TTL): already answered,
    // so it resumes none, and sends the run's message again.
    expect(await handler(event, { awsRequestId: 'r2' })).toEqual({ started: [], resumed: [] });
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(before + 1);
    const done = await pollUntil(a, runId, ['completed', 'failed']);
    a.close();
    expect(done.status).toBe('completed');
    expect(done.summary).toContain(`"id":"${event.id}"`);
  });

  it('an event whose payload no wait may take (nested past 64 levels) is logged and resumes nothing, not thrown for EventBridge to retry a day', { timeout: 120_000 }, async () => {
    const runId = `aws-deep-${randomUUID().slice(0, 6)}`;
    const key = `order-${randomUUID().slice(0, 6)}`;
    const a = container(new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } }));
    await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    await pollUntil(a, runId, ['waiting']);
    const { log, lines } = captureLogs();
    const handler = createEventHandler({ runtime: a.runtime, events: events(a.runtime), agent: waitAgent(new FakeRows(), []), log, codeVersion: 'test' });
    let deep: unknown = 'bottom';
    for (let i = 0; i < 70; i++) deep = { deep };
    const event = eventBridge('order.paid', { key, deep });
    expect(await handler(event, { awsRequestId: 'd1' })).toEqual({ started: [], resumed: [] });
    expect(lines.filter((l) => l.event === 'event-invalid')).toMatchObject([{ eventId: event.id, error: 'the event payload is nested deeper than 64 levels, or contains itself' }]);
    expect((await state(runId)).status).toBe('waiting');
    a.close();
  });

  it('an event that comes before the wait begins is matched when it does', { timeout: 120_000 }, async () => {
    const runId = `aws-early-${randomUUID().slice(0, 6)}`;
    const key = `order-${randomUUID().slice(0, 6)}`;
    const a = container(new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } }));
    const handler = createEventHandler({ runtime: a.runtime, events: events(a.runtime), agent: waitAgent(new FakeRows(), []), log: silentLogger, codeVersion: 'test' });
    const early = eventBridge('order.paid', { key, early: true });
    expect(await handler(early, { awsRequestId: 'e0' })).toEqual({ started: [], resumed: [] });
    await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    const done = await pollUntil(a, runId, ['completed', 'failed']);
    a.close();
    expect(done.steps[0]!.result.text).toContain(`"id":"${early.id}"`);
  });

  it('an event resumes every run waiting for it that it can read: one unreadable or of newer code is logged, where it kept the event from the rest', { timeout: 120_000 }, async () => {
    const key = `order-${randomUUID().slice(0, 6)}`;
    const a = container(new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } }));
    // Answered in run id order: the two it cannot read come first.
    const tag = randomUUID().slice(0, 6);
    const runIds = ['a-unreadable', 'b-newer', 'c-ok', 'd-ok'].map((name) => `aws-many-${tag}-${name}`);
    const [unreadable, newer, ...ok] = runIds as [string, string, string, string];
    for (const runId of runIds) await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    for (const runId of runIds) await pollUntil(a, runId, ['waiting']);
    const headKey = (runId: string) => ({ [PK]: runPk(runId), [SK]: HEAD_SK });
    const headOf = async (runId: string) => (await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: headKey(runId) }))).Item!.head as string;
    const setHead = (runId: string, head: string) => resources.clients.doc.send(new UpdateCommand({
      TableName: resources.tableName, Key: headKey(runId), UpdateExpression: 'SET head = :head', ExpressionAttributeValues: { ':head': head },
    }));
    const newerHead = await headOf(newer);
    await setHead(unreadable, '{not json');
    await setHead(newer, JSON.stringify({ ...JSON.parse(newerHead), formatVersion: 9 }));
    const { log, lines } = captureLogs();
    const handler = createEventHandler({ runtime: a.runtime, events: events(a.runtime), agent: waitAgent(new FakeRows(), []), log, codeVersion: 'test' });
    const paid = eventBridge('order.paid', { key });
    // The newer code's run is thrown for EventBridge to retry (a newer events function may take it); the rest are resumed first.
    await expect(handler(paid, { awsRequestId: 'm1' })).rejects.toThrow(`run ${newer}: head has head format 9`);
    for (const runId of ok) expect((await state(runId)).status, runId).toBe('running');
    expect(lines.filter((l) => l.event === 'event-answer-error').map((l) => [l.runId, l.eventId])).toEqual(expect.arrayContaining([[unreadable, paid.id], [newer, paid.id]]));
    // Without the newer run, the unreadable one alone is only logged: no retry can read it, and its deadline fails it.
    await setHead(newer, newerHead);
    expect(await handler(paid, { awsRequestId: 'm2' })).toEqual({ started: [], resumed: [newer] });
    for (const runId of [newer, ...ok]) expect((await pollUntil(a, runId, ['completed', 'failed'])).summary, runId).toContain(`"id":"${paid.id}"`);
    a.close();
    expect((await resources.runtime().store.load(unreadable))!.status).toBe('waiting');
  });

  it('a long wait leaves nothing in the queue; the sweeper sends its timer when it comes due, and the run times out', { timeout: 120_000 }, async () => {
    const runId = `aws-timer-${randomUUID().slice(0, 6)}`;
    const a = container(new ApprovalFlowModel());
    await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    const waiting = await pollUntil(a, runId, ['waiting']);
    a.close();
    const deadline = waiting.wait!.deadline;
    const sweeperRuntime = resources.runtime();
    // An hour before the deadline the sweep sends nothing; past it, the timer.
    expect((await sendDueTimers({ store: sweeperRuntime.store, queue: sweeperRuntime.queue, clock: { now: () => deadline - 3_600_000 + 60_000 }, log: silentLogger }))
      .filter((w) => w.runId === runId)).toEqual([]);
    const late = { now: () => deadline + 1000 };
    const sent = await sendDueTimers({ store: sweeperRuntime.store, queue: sweeperRuntime.queue, clock: late, log: silentLogger });
    expect(sent.filter((w) => w.runId === runId)).toMatchObject([{ waitId: waiting.wait!.id }]);
    const b = container(new ApprovalFlowModel(), { clock: late });
    const done = await pollUntil(b, runId, ['completed', 'failed']);
    b.close();
    expect(done).toMatchObject({ status: 'completed', summary: 'Nobody approved in time: old_rows kept.' });
  });

  it('a short wait\'s timer travels in SQS, in a group of its own, and its deadline resumes the run', { timeout: 120_000 }, async () => {
    const runId = `aws-short-${randomUUID().slice(0, 6)}`;
    const a = container(new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key: `k-${runId}`, timeoutSeconds: 2 } }));
    await startTestRun(a.runtime, waitAgent(new FakeRows(), []), runId);
    await pollUntil(a, runId, ['waiting']);
    const timers = (await receiveAll(resources.clients, resources.queueUrl, 1)).filter((m) => m.Attributes?.MessageGroupId === `${runId}~timer`);
    expect(new Set(timers.map((m) => m.MessageId)).size).toBe(1);
    expect(JSON.parse(timers[0]!.Body!)).toEqual({ runId, version: (await resources.runtime().store.load(runId))!.version });
    const done = await pollUntil(a, runId, ['completed', 'failed'], 60);
    a.close();
    expect(done.steps[0]!.result.text).toContain('"timedOut":true');
  });

  it('agents sharing a table: an event resumes only the events function\'s own agent\'s runs, and starts a run for each agent it triggers', { timeout: 120_000 }, async () => {
    const key = `order-${randomUUID().slice(0, 6)}`;
    const trigger = { source: 'aws.s3', detailType: 'Object Created', goal: (e: { detail: unknown }) => `Process ${(e.detail as { object: { key: string } }).object.key}` };
    const shopA = defineAgent({ ...waitAgent(new FakeRows(), []), startOn: [trigger] });
    const shopB = defineAgent({ ...waitAgent(new FakeRows(), []), name: 'shop-b', startOn: [trigger] });
    const runId = `aws-shared-${randomUUID().slice(0, 6)}`;
    const b = new WorkerProcess({ resources, agent: shopB, model: new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } }), waits: waitsOf });
    await startTestRun(b.runtime, shopB, runId);
    await pollUntil(b, runId, ['waiting']);
    const handlerOf = (agent: typeof shopA) => createEventHandler({ runtime: b.runtime, events: events(b.runtime), agent, log: silentLogger, codeVersion: 'test' });
    // Agent A's function sees the event too (each agent's rule does): its queue is not B's, so it leaves B's run to B.
    const paid = eventBridge('order.paid', { key });
    expect(await handlerOf(shopA)(paid, { awsRequestId: 'a1' })).toEqual({ started: [], resumed: [] });
    // So does A's API, sent the event by a program.
    const posted = await apiHandler({ agent: shopA, agentQueue: true })(apiEvent('POST', '/events', JSON.stringify({ type: 'order.paid', key }), { 'content-type': 'application/json' }));
    expect({ status: posted.statusCode, resumed: JSON.parse(posted.body).resumed }).toEqual({ status: 202, resumed: [] });
    // Nor does it answer, cancel or fork B's run when asked by its id: told whose run it is.
    const waitId = (await state(runId)).wait!.id;
    for (const [path, body] of [[`/runs/${runId}/waits/${waitId}`, { decision: 'approve', by: APPROVER }], [`/runs/${runId}/cancel`, { by: 'ops' }], [`/runs/${runId}/fork`, { fromStep: 0 }]] as const) {
      const refused = await apiHandler({ agent: shopA, agentQueue: true })(apiEvent('POST', path, JSON.stringify(body), { 'content-type': 'application/json' }));
      expect({ status: refused.statusCode, body: JSON.parse(refused.body) }, path).toEqual({
        status: 409, body: { error: `run ${runId} belongs to agent "shop-b", not "${shopA.name}": operate it through that agent's API, whose queue its workers read` },
      });
    }
    expect((await state(runId)).status).toBe('waiting');
    expect(await handlerOf(shopB)(paid, { awsRequestId: 'b1' })).toEqual({ started: [], resumed: [runId] });
    const done = await pollUntil(b, runId, ['completed', 'failed']);
    b.close();
    expect(done.steps[0]!.result.text).toContain(`"id":"${paid.id}"`);
    // One S3 event, two agents started on it: a run for each, each its agent's.
    const created = eventBridge('Object Created', { bucket: { name: 'inbox' }, object: { key: `in/${randomUUID()}.csv` } }, randomUUID(), 'aws.s3');
    const a = await handlerOf(shopA)(created, { awsRequestId: 'a2' });
    const bStarted = await handlerOf(shopB)(created, { awsRequestId: 'b2' });
    expect(a.started).toMatchObject([{ created: true }]);
    expect(bStarted.started).toMatchObject([{ created: true }]);
    expect(bStarted.started[0]!.runId).not.toBe(a.started[0]!.runId);
    expect((await state(a.started[0]!.runId)).agent).toBe(shopA.name);
    expect((await state(bStarted.started[0]!.runId)).agent).toBe('shop-b');
  });

  it('the events function refuses what is not an EventBridge event, and an invalid goal a trigger makes is logged, not thrown', { timeout: 60_000 }, async () => {
    const runtime = resources.runtime();
    const { log, lines } = captureLogs();
    const agent = defineAgent({
      ...waitAgent(new FakeRows(), []),
      startOn: [
        { source: 'shop', detailType: 'order.created', goal: (e) => `Process ${JSON.stringify(e.detail)}` },
        { source: 'shop', goal: () => '   ' },
      ],
    });
    const handler = createEventHandler({ runtime, events: events(runtime), agent, log, codeVersion: 'test' });
    // An SQS record, an SNS envelope, an event without its id, nothing: each refused by name, none started.
    const sqs = { Records: [{ messageId: 'm1', body: '{}', eventSource: 'aws:sqs' }] };
    const sns = { Records: [{ EventSource: 'aws:sns', Sns: { Message: '{}' } }] };
    const noId = { source: 'aws.s3', 'detail-type': 'Object Created', detail: { object: { key: 'a.csv' } } };
    for (const bad of [sqs, sns, noId, null, 'text']) {
      await expect(handler(bad as never, { awsRequestId: 'x' })).rejects.toThrow(/^not an EventBridge event \(it needs string id, source and detail-type\)/);
    }
    // 20 KB of detail (EventBridge takes 256 KB) makes a goal over the limit; the other trigger's goal is blank.
    const big = eventBridge('order.created', { lines: 'x'.repeat(20_000), key: `k-${randomUUID()}` });
    expect(await handler(big, { awsRequestId: 'r1' })).toEqual({ started: [], resumed: [] });
    const errors = lines.filter((l) => l.event === 'trigger-error');
    expect(errors.map((l) => l.trigger)).toEqual([0, 1]);
    expect(errors[0]!.error).toMatch(/^the goal is \d+ bytes; the limit is 16384/);
    expect(errors[1]!.error).toMatch(/^the goal is empty/);
    // The event was still kept for waits: it reaches a run that begins waiting for it.
    expect(await events(runtime).find('order.created', (big.detail as { key: string }).key, 0)).toMatchObject([{ id: big.id }]);
  });

  it('an event that starts no run and can name no wait is logged with why, where it was dropped without a word', { timeout: 60_000 }, async () => {
    const runtime = resources.runtime();
    const { log, lines } = captureLogs();
    const handler = createEventHandler({ runtime, events: events(runtime), agent: waitAgent(new FakeRows(), []), log, codeVersion: 'test' });
    expect(await handler(eventBridge('order.paid', { key: 'Order 42' }), { awsRequestId: 'u1' })).toEqual({ started: [], resumed: [] });
    expect(await handler(eventBridge('order.paid', { total: 3 }), { awsRequestId: 'u2' })).toEqual({ started: [], resumed: [] });
    // 40: pino's warn.
    expect(lines.filter((l) => l.event === 'event-unmatched').map((l) => [l.level, l.reason])).toEqual([
      [40, 'its key "Order 42" is not 1-256 letters, digits or ._:/@+-'],
      [40, 'it has no key (detail.key or detail.correlationKey)'],
    ]);
    // One it can name is kept for waits, and says nothing.
    await handler(eventBridge('order.paid', { key: `k-${randomUUID()}` }), { awsRequestId: 'u3' });
    expect(lines.filter((l) => l.event === 'event-unmatched')).toHaveLength(2);
  });

  it('an event a trigger is for, whose goal starts no run (an object it does not handle), is no warning that it names no wait', { timeout: 60_000 }, async () => {
    const runtime = resources.runtime();
    const { log, lines } = captureLogs();
    const agent = defineAgent({
      ...waitAgent(new FakeRows(), []),
      startOn: [{ source: 'aws.s3', detailType: 'Object Created', goal: (e) => {
        const key = (e.detail as { object: { key: string } }).object.key;
        return key.endsWith('.csv') ? `Process ${key}` : undefined;
      } }],
    });
    const handler = createEventHandler({ runtime, events: events(runtime), agent, log, codeVersion: 'test' });
    const png = eventBridge('Object Created', { bucket: { name: 'inbox' }, object: { key: `in/${randomUUID()}.png` } }, randomUUID(), 'aws.s3');
    expect(await handler(png, { awsRequestId: 'p1' })).toEqual({ started: [], resumed: [] });
    expect(lines.filter((l) => l.level as number >= 40)).toEqual([]);
    expect(lines.filter((l) => l.event === 'trigger-declined')).toMatchObject([{ level: 20, eventId: png.id, trigger: 0 }]);
    // An event no trigger is for, and no wait can take, is still said.
    const deleted = eventBridge('Object Deleted', { bucket: { name: 'inbox' }, object: { key: 'in/a.csv' } }, randomUUID(), 'aws.s3');
    await handler(deleted, { awsRequestId: 'p2' });
    expect(lines.filter((l) => l.event === 'event-unmatched').map((l) => l.eventId)).toEqual([deleted.id]);
  });

  it('a trigger sees the event\'s account, region, resources and replay name, and a replayed event starts no second run', { timeout: 60_000 }, async () => {
    const runtime = resources.runtime();
    const seen: IncomingEvent[] = [];
    const agent = defineAgent({
      ...waitAgent(new FakeRows(), []),
      startOn: [{ source: 'aws.s3', detailType: 'Object Created', goal: (e) => { seen.push(e); return `Process ${(e.detail as { object: { key: string } }).object.key}`; } }],
    });
    const handler = createEventHandler({ runtime, events: events(runtime), agent, log: silentLogger, codeVersion: 'test' });
    const created = { ...eventBridge('Object Created', { bucket: { name: 'inbox' }, object: { key: 'in/a.csv' } }, randomUUID(), 'aws.s3'), resources: ['arn:aws:s3:::inbox'] };
    const first = await handler(created, { awsRequestId: 'r1' });
    const replayed = await handler({ ...created, 'replay-name': 'monday-replay' } as typeof created, { awsRequestId: 'r2' });
    // Only id, source, detail-type, time and detail came through: a goal could not tell a bucket by its ARN, nor a replay.
    expect(seen.map((e) => [e.account, e.region, e.resources, e.replayName])).toEqual([
      ['000000000000', 'us-east-1', ['arn:aws:s3:::inbox'], undefined],
      ['000000000000', 'us-east-1', ['arn:aws:s3:::inbox'], 'monday-replay'],
    ]);
    expect(first.started).toMatchObject([{ created: true }]);
    expect(replayed.started).toEqual([{ runId: first.started[0]!.runId, created: false }]);
  });

  it('an event matching a trigger starts one run, however often EventBridge delivers it', { timeout: 60_000 }, async () => {
    const runtime = resources.runtime();
    const agent = defineAgent({
      ...waitAgent(new FakeRows(), []),
      startOn: [{ source: 'aws.s3', detailType: 'Object Created', goal: (e) => `Process ${(e.detail as { object: { key: string } }).object.key}` }],
    });
    const handler = createEventHandler({ runtime, events: events(runtime), agent, log: silentLogger, codeVersion: 'test' });
    const event = eventBridge('Object Created', { bucket: { name: 'inbox' }, object: { key: `in/${randomUUID()}.csv` } }, randomUUID(), 'aws.s3');
    const first = await handler(event, { awsRequestId: 'r1' });
    const second = await handler(event, { awsRequestId: 'r2' });
    expect(first.started).toMatchObject([{ created: true }]);
    expect(second.started).toEqual([{ runId: first.started[0]!.runId, created: false }]);
    expect((await state(first.started[0]!.runId)).goal).toMatch(/^Process in\//);
  });
});
