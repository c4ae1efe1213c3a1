import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TransientError } from '../../lib/core/errors.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import { silentLogger } from '../../lib/log.ts';
import type { RunMessage, RunQueue } from '../../lib/ports.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { listen } from '../support/http-app.ts';
import { ManualClock, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { APPROVER, ApprovalFlowModel, waitAgent } from '../support/wait-agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { startRun } from '../../lib/engine/start.ts';
import { signApproval } from '../../lib/waits/approval-token.ts';
import { answerApproval } from '../../lib/waits/answer.ts';

/**
 * A store whose writes cannot carry the queue's work (as DynamoDB's cannot carry SQS's) writes the run and
 * then sends its message. The send refused past the SDK's retries (SQS throttling: a fault no local server
 * produces, so the queue's send alone is made to fail here) was a 500 "the request changed nothing it did
 * not finish", though the run was saved: a start without a runId did not learn which run it had made.
 */
describe('a write of the API whose run is saved and whose message is not sent', () => {
  const db = tempDb();
  const clock = new ManualClock();
  const worker = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), []), model: new ApprovalFlowModel(), clock, workerId: 'api' });
  const sent: RunMessage[] = [];
  let refuse = true;
  const queue: RunQueue = Object.assign(Object.create(worker.runtime.queue) as RunQueue, {
    send: async (message: RunMessage) => {
      if (refuse) throw new TransientError('Rate exceeded');
      sent.push(message);
    },
    // A start of a running run that exists sends its latest version's message again this way.
    redrive: async (message: RunMessage) => { sent.push(message); },
  });
  let url = '';
  let close = async () => {};
  beforeAll(async () => {
    const app = createHttpApp({
      store: new SqliteCheckpointStore(worker.runtime.db, { clock }), blobs: worker.runtime.blobs, queue, clock, workerId: 'api',
      codeVersion: 'test', log: silentLogger, agent: worker.deps.agent, signingKey: async () => Buffer.alloc(32, 1), apiToken: 'token',
    });
    ({ url, close } = await listen(app));
  });
  afterAll(async () => {
    await close();
    worker.runtime.close();
    db.cleanup();
  });
  const post = (body: unknown) => fetch(`${url}/runs`, { method: 'POST', headers: { authorization: 'Bearer token', 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('answers 503 naming the saved run; the same start with that runId then sends its message and makes no second run', async () => {
    const refused = await post({ goal: 'drop the old rows' });
    expect(refused.status).toBe(503);
    const body = await refused.json() as { error: string; runId: string; version: number };
    expect(body).toMatchObject({ runId: expect.stringMatching(/.+/), version: 1 });
    expect(body.error).toBe(`run ${body.runId} is saved at version 1, but its message to the workers was not sent (Rate exceeded): a worker's sweep sends it again once the run has stalled`);
    expect((await worker.runtime.store.list({ limit: 10 })).map((r) => r.runId)).toEqual([body.runId]);

    refuse = false;
    const again = await post({ goal: 'drop the old rows', runId: body.runId });
    expect(again.status).toBe(200);
    expect(sent).toEqual([{ runId: body.runId, version: 1 }]);
    expect((await worker.runtime.store.list({ limit: 10 })).map((r) => r.runId)).toEqual([body.runId]);
  });

  /** The same for the other writes that send a message: each saved, each said with its run and version. */
  it('answers 503 naming the run for an answer, a fork and a retry whose message is not sent, each saved; each asked again sends it', async () => {
    refuse = false;
    await startRun(worker.deps, { goal: 'drop the old rows', runId: 'sent-wait' });
    await startRun(worker.deps, { goal: 'drop the old rows', runId: 'sent-cap', stepCap: 1 });
    await workVisible(worker.deps, worker.runtime);
    const waiting = decodeState((await worker.runtime.store.load('sent-wait'))!);
    expect(waiting.status).toBe('waiting');
    expect(decodeState((await worker.runtime.store.load('sent-cap'))!).status).toBe('capped');
    refuse = true;
    sent.length = 0;
    const refused = async (path: string, body: unknown) => {
      const response = await fetch(`${url}${path}`, { method: 'POST', headers: { authorization: 'Bearer token', 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const text = await response.text();
      expect(response.status, `${path}: ${text}`).toBe(503);
      return JSON.parse(text) as { error: string; runId: string; version: number };
    };
    const saved = async (runId: string) => (await worker.runtime.store.load(runId))!;

    const answered = await refused(`/runs/sent-wait/waits/${waiting.wait!.id}`, { decision: 'approve', by: APPROVER });
    expect(answered).toMatchObject({ runId: 'sent-wait', version: (await saved('sent-wait')).version, error: expect.stringContaining('its message to the workers was not sent (Rate exceeded)') });
    const resumed = decodeState(await saved('sent-wait'));
    expect(resumed.status).toBe('running');
    expect(resumed.wait).toBeUndefined();

    const forked = await refused('/runs/sent-cap/fork', { fromStep: 1, runId: 'sent-fork', stepCap: 5 });
    expect(forked).toMatchObject({ runId: 'sent-fork', version: 1 });
    expect(decodeState(await saved('sent-fork'))).toMatchObject({ status: 'running', forkedFrom: { runId: 'sent-cap' } });

    const retried = await refused('/runs/sent-cap/retry', { stepCap: 5 });
    expect(retried).toMatchObject({ runId: 'sent-cap', version: (await saved('sent-cap')).version });
    expect(decodeState(await saved('sent-cap'))).toMatchObject({ status: 'running', stepCap: 5 });
    expect(sent).toEqual([]);

    // Each asked again once SQS takes messages: the run is running, and its message is sent now, where a
    // repeated answer or retry only said it was answered or running and the run waited for the sweep.
    refuse = false;
    const again = async (path: string, body: unknown, status: number) => {
      const response = await fetch(`${url}${path}`, { method: 'POST', headers: { authorization: 'Bearer token', 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const text = await response.text();
      expect(response.status, `${path}: ${text}`).toBe(status);
    };
    await again(`/runs/sent-wait/waits/${waiting.wait!.id}`, { decision: 'approve', by: APPROVER }, 409);
    await again('/runs/sent-cap/fork', { fromStep: 1, runId: 'sent-fork', stepCap: 5 }, 200);
    // A conflict with the running run (RunStateError), as the answer's is: nothing changed but the send.
    await again('/runs/sent-cap/retry', { stepCap: 5 }, 409);
    expect(sent).toEqual([
      { runId: 'sent-wait', version: answered.version }, { runId: 'sent-fork', version: 1 }, { runId: 'sent-cap', version: retried.version },
    ]);
    // The CLI's approve by run id, the same.
    sent.length = 0;
    const deps = { store: new SqliteCheckpointStore(worker.runtime.db, { clock }), blobs: worker.runtime.blobs, queue, clock, workerId: 'cli', codeVersion: 'test', log: silentLogger };
    expect(await answerApproval(deps, 'sent-wait', { decision: 'approve' })).toMatchObject({ outcome: 'already-answered' });
    expect(sent).toEqual([{ runId: 'sent-wait', version: answered.version }]);
  });

  /** The approver's browser, where an answer whose message was not sent came back as raw JSON. */
  it('answers an approval link\'s press whose message is not sent with a page saying the answer is saved', async () => {
    refuse = false;
    await startRun(worker.deps, { goal: 'drop the old rows', runId: 'sent-link' });
    await workVisible(worker.deps, worker.runtime);
    const wait = decodeState((await worker.runtime.store.load('sent-link'))!).wait!;
    const token = signApproval({ runId: 'sent-link', waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline }, Buffer.alloc(32, 1));
    refuse = true;
    const press = () => fetch(`${url}/approvals/${token}`, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) });
    const pressed = await press();
    expect(pressed.status).toBe(503);
    expect(pressed.headers.get('content-type')).toMatch(/^text\/html/);
    const version = (await worker.runtime.store.load('sent-link'))!.version;
    expect(await pressed.text()).toContain(`run sent-link is saved at version ${version}, but its message to the workers was not sent (Rate exceeded)`);
    // Saved: pressed again, it is told so.
    const again = await press();
    expect(again.status).toBe(409);
    expect(await again.text()).toContain(`Already approved by ${APPROVER}`);
  });
});
