import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { PK, SK, runPk, stepSk } from '../../lib/aws/table-layout.ts';
import { showStepText } from '../../lib/cli/format.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { UnreadableCheckpointError } from '../../lib/core/errors.ts';
import { promptText } from '../../lib/core/prompt.ts';
import { showRun } from '../../lib/engine/operate/show.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { silentLogger } from '../../lib/log.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { readOutput } from '../../lib/tools/read-output.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
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
