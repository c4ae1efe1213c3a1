import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { DynamoEventBuffer } from '../../lib/aws/dynamo-event-buffer.ts';
import { createEventHandler } from '../../lib/aws/event-handler.ts';
import { PK, SK, eventPk, runPk, stepSk } from '../../lib/aws/table-layout.ts';
import { SQS_MAX_TIMER_MS } from '../../lib/aws/wait-services.ts';
import { showStepText } from '../../lib/cli/format.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { UnreadableCheckpointError } from '../../lib/core/errors.ts';
import { promptText } from '../../lib/core/prompt.ts';
import { showRun } from '../../lib/engine/operate/show.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { silentLogger } from '../../lib/log.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { readOutput } from '../../lib/tools/read-output.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { OneWaitModel, waitAgent } from '../support/wait-agent.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from './lambda-harness.ts';
import { captureLogs } from './log-capture.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

/** Step records over this many bytes are spilled to S3: every record of these runs. */
const SPILL = 500;

/** What a blob is made into in the bucket: deleted (a lifecycle rule, by hand), replaced, or a gzip body cut short. */
const DAMAGE = {
  missing: { reason: /which the blob store no longer has$/, apply: (key: string) => new DeleteObjectCommand({ Bucket: resources!.bucketName, Key: key }) },
  replaced: {
    reason: /which the blob store gives back damaged: its 5 bytes came back with other content \(the object was replaced or cut short\)$/,
    apply: (key: string) => new PutObjectCommand({ Bucket: resources!.bucketName, Key: key, Body: 'hello' }),
  },
  'cut short': {
    reason: /which the blob store gives back damaged: its 5 bytes do not decompress \(unexpected end of file\): the object was replaced or cut short$/,
    apply: (key: string) => new PutObjectCommand({
      Bucket: resources!.bucketName, Key: key, Body: Buffer.from([0x1f, 0x8b, 8, 0, 0]), Metadata: { 'stepwise-encoding': 'gzip' },
    }),
  },
} as const;

describe('a spilled step record whose S3 object is gone or damaged', () => {
  for (const [how, damage] of Object.entries(DAMAGE)) {
    it(`${how}: the next delivery fails the run, naming the step, the blob and what is wrong, and is not delivered again`, async () => {
      resources = await createTestResources('damaged-record');
      const db = new FakeDatabase();
      const agent = writeRowsAgent(db);
      const model = new ScriptedModel({ steps: 3, payload: () => 'x'.repeat(2 * SPILL) });
      const runtime = resources.runtime({ spillBytes: SPILL });
      const runId = await startTestRun(runtime, agent, 'damaged-record-run');
      const first = new WorkerProcess({ resources, agent, model, spillBytes: SPILL });
      await pollOnce(resources.clients, resources.queueUrl, first);
      first.close();
      const record = (await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: runPk(runId), [SK]: stepSk(1) } }))).Item!;
      const ref = String(record.recordRef);
      expect(ref).toMatch(/^sha256:/);
      await resources.clients.s3.send(damage.apply(runtime.blobs.key(ref)));

      // Read as show and fork read it: the reason says which record and why, not "step 1 is not valid JSON".
      const reason = new RegExp(`^checkpoint 2 of run ${runId} is unreadable: step 1: record was stored as ${ref}, ${damage.reason.source}`);
      const stored = (await runtime.store.load(runId))!;
      expect(() => decodeState(stored)).toThrow(UnreadableCheckpointError);
      expect(() => decodeState(stored)).toThrow(reason);

      // A worker with nothing cached (a new container): one delivery fails the run with that reason. A
      // damaged object was an error escaping the load, its message delivered again and again.
      const { log, lines } = captureLogs();
      const second = new WorkerProcess({ resources, agent, model, spillBytes: SPILL, log });
      const polled = await pollOnce(resources.clients, resources.queueUrl, second);
      second.close();
      expect(polled.failures).toEqual([]);
      expect(lines.filter((line) => line.event === 'delivery-error')).toEqual([]);
      const [failed] = await runtime.store.list({ status: 'failed' });
      expect(failed).toMatchObject({ runId, status: 'failed', reason: expect.stringMatching(reason) });
      expect(db.applied.size).toBe(1);
    });
  }
});

/** Step 1 returns an 11 KB report (stored by reference); step 2 reads it; then DONE. */
class ReaderModel implements Model {
  readonly name = 'reader-stub';

  async decide(request: ModelRequest): Promise<ModelReply> {
    if (request.step === 1) return { kind: 'tool', tool: 'fetch_report', input: {} };
    if (request.step === 2) {
      const ref = /stored as (sha256:[0-9a-f]{64})/.exec(promptText(request.prompt))![1]!;
      return { kind: 'tool', tool: 'read_output', input: { ref } };
    }
    return { kind: 'done', summary: 'read what there was' };
  }
}

describe('an output whose S3 object was replaced', () => {
  it('read_output answers the model that the output is damaged, as it does for one gone, and the run goes on', async () => {
    resources = await createTestResources('damaged-output');
    const agent = defineAgent({
      name: 'reader',
      tools: [
        tool({ name: 'fetch_report', description: 'Fetch the report.', input: z.object({}), sideEffect: false, run: () => 'row of the report; '.repeat(600) }),
        readOutput(),
      ],
    });
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'damaged-output-run');
    const model = new ReaderModel();
    const first = new WorkerProcess({ resources, agent, model });
    await pollOnce(resources.clients, resources.queueUrl, first);
    first.close();
    const ref = decodeState((await runtime.store.load(runId))!).steps[0]!.result.ref!;
    await resources.clients.s3.send(DAMAGE.replaced.apply(runtime.blobs.key(ref)));

    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }) });
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state.status).toBe('completed');
    expect(state.steps[1]!.result).toMatchObject({
      ok: false,
      text: `the output ${ref} is damaged in the blob store (its 5 bytes came back with other content (the object was replaced or cut short)); its excerpt is all that is left`,
    });
  });
});

describe('an output whose S3 object was replaced, shown whole', () => {
  it('show --full, GET /runs/:id/steps/:n and the inspector show its excerpt and say it is damaged, as they do for one gone', async () => {
    resources = await createTestResources('damaged-show');
    const agent = defineAgent({
      name: 'reader',
      tools: [tool({ name: 'fetch_report', description: 'Fetch the report.', input: z.object({}), sideEffect: false, run: () => 'row of the report; '.repeat(600) })],
    });
    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'damaged-show-run');
    const first = new WorkerProcess({ resources, agent, model: new ReaderModel() });
    await pollOnce(resources.clients, resources.queueUrl, first);
    first.close();
    const ref = decodeState((await runtime.store.load(runId))!).steps[0]!.result.ref!;
    await resources.clients.s3.send(DAMAGE.replaced.apply(runtime.blobs.key(ref)));
    const why = 'its 5 bytes came back with other content (the object was replaced or cut short)';

    // Each failed as a whole (DamagedBlobError), where a missing output showed as its excerpt.
    const view = await showRun(runtime, runId, { full: true });
    expect(view.steps[0]).toMatchObject({ step: 1, outputDamaged: why });
    expect(view.steps[0]!.output).toBeUndefined();
    expect(showStepText(view.steps[0]!, 'x')).toContain(`(the full 11400 B were stored as ${ref}, which the blob store gives back damaged: ${why})`);

    const app = createHttpApp({
      store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: { now: () => Date.now() }, workerId: 'api', codeVersion: 'test',
      log: silentLogger, agent, signingKey: async () => Buffer.alloc(32, 1),
    });
    const api = await app.request(`/runs/${runId}/steps/1?full=true`);
    expect(api.status).toBe(200);
    const { record } = await api.json() as { record: { outputDamaged?: string; output?: string; result: { text: string } } };
    expect(record.outputDamaged).toBe(why);
    expect(record.output).toBeUndefined();
    expect(record.result.text).toMatch(/^row of the report; /);

    const page = await app.request(`/inspect/runs/${runId}/steps/1`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain(`<p id="output-damaged">The whole output (11400 bytes) was stored as <code>${ref}</code>, which the blob store gives back damaged (${why}): this is its excerpt.</p>`);
    const raw = await app.request(`/inspect/runs/${runId}/steps/1/output`);
    expect(raw.status).toBe(404);
    expect(await raw.text()).toContain(`which the blob store gives back damaged: ${why}.`);
  });
});

/** An EventBridge event as the events function receives it. */
function eventBridge(detailType: string, detail: unknown, id: string): EventBridgeEvent<string, unknown> {
  return { version: '0', id, 'detail-type': detailType, source: 'shop', account: '000000000000', time: new Date().toISOString(), region: 'us-east-1', resources: [], detail };
}

describe('an event kept before its wait, whose payload object is gone or damaged', () => {
  for (const how of ['missing', 'replaced'] as const) {
    it(`${how}: the wait passes over it with a line that says so and goes on waiting; the event sent again resumes the run`, { timeout: 60_000 }, async () => {
      resources = await createTestResources('damaged-event');
      const runtime = resources.runtime();
      const events = new DynamoEventBuffer({ doc: runtime.clients.doc, tableName: resources.tableName, blobs: runtime.blobs });
      const agent = waitAgent(new FakeRows(), []);
      const handler = createEventHandler({ runtime, events, agent, log: silentLogger, codeVersion: 'test' });
      const key = 'order-7';
      // Over 64 KB: the payload is kept in S3, and the item holds its ref.
      const early = eventBridge('order.paid', { key, note: 'paid in full; '.repeat(6_000) }, 'evt-early');
      expect(await handler(early, { awsRequestId: 'e1' })).toEqual({ started: [], resumed: [] });
      const item = (await resources.clients.doc.send(new GetCommand({ TableName: resources.tableName, Key: { [PK]: eventPk('order.paid', key), [SK]: early.id } }))).Item!;
      const ref = String(item.payloadRef);
      expect(ref).toMatch(/^sha256:/);
      await resources.clients.s3.send(DAMAGE[how].apply(runtime.blobs.key(ref)));

      const runId = await startTestRun(runtime, agent, 'damaged-event-run');
      const { log, lines } = captureLogs();
      const model = new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key, timeoutSeconds: 300 } });
      const worker = new WorkerProcess({ resources, agent, model, log, waits: (r) => ({ events: new DynamoEventBuffer({ doc: r.clients.doc, tableName: resources!.tableName, blobs: r.blobs }), maxTimerMs: SQS_MAX_TIMER_MS }) });
      try {
        // The step that begins the wait looks for events kept before it. The lost one threw there, failing
        // this delivery and every one after it: the run waited with no timer, its message never done.
        const polled = await pollOnce(resources.clients, resources.queueUrl, worker);
        expect(polled.failures).toEqual([]);
        expect(lines.filter((line) => line.event === 'delivery-error')).toEqual([]);
        expect(decodeState((await runtime.store.load(runId))!)).toMatchObject({ status: 'waiting', step: 0 });
        expect(lines.filter((line) => line.event === 'early-event-unreadable')).toMatchObject([{
          level: 50, runId, eventId: early.id, type: 'order.paid', key,
          error: expect.stringMatching(new RegExp(`^payload was stored as ${ref}, ${DAMAGE[how].reason.source}`)),
          msg: `event ${early.id} (order.paid/${key}) came before this wait but its payload cannot be read, so it answers no wait; send the event again to resume the run`,
        }]);
        // Its timer is queued: the wait ends at its deadline if nothing answers it.
        expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);

        // Sent again (EventBridge's retry: the same id), the event answers the wait with its payload.
        expect(await handler(early, { awsRequestId: 'e2' })).toMatchObject({ resumed: [runId] });
        for (let i = 0; i < 10 && decodeState((await runtime.store.load(runId))!).status !== 'completed'; i++) {
          await pollOnce(resources.clients, resources.queueUrl, worker);
        }
      } finally {
        worker.close();
      }
      const done = decodeState((await runtime.store.load(runId))!);
      expect(done).toMatchObject({ status: 'completed', step: 1 });
      expect(done.steps[0]!.result).toMatchObject({ ok: true, text: expect.stringContaining('paid in full; ') });
      expect(done.steps[0]!.waitId).toBeDefined();
    });
  }
});
