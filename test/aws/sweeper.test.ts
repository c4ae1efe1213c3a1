import { DeleteMessageCommand, DeleteQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { beginWait, waitRecordFor } from '../../lib/core/waits.ts';
import { sweepStalledRuns } from '../../lib/engine/sweep.ts';
import { sendDueTimers } from '../../lib/waits/timers.ts';
import { silentLogger } from '../../lib/log.ts';
import { systemClock } from '../../lib/ports.ts';
import { META, newState } from '../support/states.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

const MINUTE = 60_000;

describe('the sweeper: runs whose message was lost', () => {
  it('re-enqueues a run whose message went to the dead-letter queue, once per stall window, and the run completes', async () => {
    // Two receives, then SQS moves the message to the DLQ: the run would wait forever.
    resources = await createTestResources('sweep-dlq', { maxReceiveCount: 2 });
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const model = new ScriptedModel({ steps: 3 });
    const runtime = resources.runtime();
    // A run that already finished: never re-enqueued.
    const finishedAgent = writeRowsAgent(new FakeDatabase());
    const done = await startTestRun(runtime, finishedAgent, 'finished-run');
    await driveRun({ resources, runId: done, spawn: () => new WorkerProcess({ resources: resources!, agent: finishedAgent, model: new ScriptedModel({ steps: 0 }) }) });
    const runId = await startTestRun(runtime, agent, 'stalled-run');

    // Every container that takes step 2 dies after the model answered.
    let worker = new WorkerProcess({ resources, agent, model, crash: { point: 'C2', step: 2 } });
    for (let i = 0; i < 8; i++) {
      const result = await pollOnce(resources.clients, resources.queueUrl, worker);
      if (result.crashed) {
        worker.close();
        worker = new WorkerProcess({ resources, agent, model, crash: { point: 'C2', step: 2 } });
      }
    }
    worker.close();
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    expect(await queueDepth(resources.clients, resources.dlqUrl)).toBe(1);
    expect((await runtime.store.load(runId))).toMatchObject({ status: 'running', version: 2 });
    expect((await runtime.store.load(done))?.status).toBe('completed');

    const deps = { store: runtime.store, queue: runtime.queue, log: silentLogger };
    // Not stalled yet by the real clock: nothing to do.
    expect(await sweepStalledRuns({ ...deps, clock: systemClock }, { stallMs: 15 * MINUTE })).toEqual([]);
    const later = { now: () => Date.now() + 20 * MINUTE };
    expect(await sweepStalledRuns({ ...deps, clock: later }, { stallMs: 15 * MINUTE })).toEqual([{ runId, version: 2 }]);
    // A second sweep in the same window does not add a copy.
    await sweepStalledRuns({ ...deps, clock: later }, { stallMs: 15 * MINUTE });
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);

    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model }) });
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state.status).toBe('completed');
    expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3]);
    for (let n = 1; n <= 3; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
    expect((await runtime.store.history(runId)).map((h) => h.version)).toEqual([1, 2, 3, 4, 5]);
  });
});

describe('the sweeper: a re-drive that is lost too', () => {
  it('is sent again in the next stall window, past the deduplication of the one lost: the run completes', async () => {
    resources = await createTestResources('sweep-lost-twice');
    const res = resources;
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const runtime = res.runtime();
    const runId = await startTestRun(runtime, agent, 'lost-twice');
    /** The queue's one message is dead-lettered (received and gone), the run still running. */
    const lose = async () => {
      const { Messages = [] } = await res.clients.sqs.send(new ReceiveMessageCommand({ QueueUrl: res.queueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 1 }));
      expect(Messages).toHaveLength(1);
      await res.clients.sqs.send(new DeleteMessageCommand({ QueueUrl: res.queueUrl, ReceiptHandle: Messages[0]!.ReceiptHandle! }));
    };
    await lose();
    const deps = { store: runtime.store, queue: runtime.queue, log: silentLogger };
    const sweepAt = (ms: number) => sweepStalledRuns({ ...deps, clock: { now: () => Date.now() + ms } }, { stallMs: 15 * MINUTE });
    expect(await sweepAt(20 * MINUTE)).toEqual([{ runId, version: 1 }]);
    await lose();
    // The same window again: its copy would pile up behind a live message, so SQS drops it.
    await sweepAt(20 * MINUTE);
    expect(await queueDepth(res.clients, res.queueUrl)).toBe(0);
    // The next window's re-drive gets through, within SQS's five minutes of the lost one. A sweeper that
    // sent every window's re-drive with one deduplication token (seed 2414154359 of chaos seed 20261204,
    // before the holder's give-up changed that schedule) left the run stuck for those five minutes.
    expect(await sweepAt(35 * MINUTE)).toEqual([{ runId, version: 1 }]);
    expect(await queueDepth(res.clients, res.queueUrl)).toBe(1);
    await driveRun({ resources: res, runId, spawn: () => new WorkerProcess({ resources: res, agent, model: new ScriptedModel({ steps: 2 }) }) });
    expect(await runtime.store.load(runId)).toMatchObject({ status: 'completed' });
    for (let n = 1; n <= 2; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
  });
});

describe('the sweeper of one agent on a shared table', () => {
  it('reads past a full page of another agent\'s stalled runs to its own agent\'s lost run', async () => {
    resources = await createTestResources('sweep-shared');
    // This agent's run lost its message an hour ago; since then the other agent has more runs idle for
    // longer than the stall window (a backlog on its queue) than a sweep takes at once.
    const hourAgo = resources.runtime({ clock: { now: () => Date.now() - 60 * MINUTE } }).store;
    await hourAgo.create({ ...newState('mine-lost'), agent: 'mine' }, META);
    const halfHourAgo = resources.runtime({ clock: { now: () => Date.now() - 30 * MINUTE } }).store;
    for (const runId of ['theirs-1', 'theirs-2', 'theirs-3']) await halfHourAgo.create({ ...newState(runId), agent: 'theirs' }, META);
    const runtime = resources.runtime();
    const deps = { store: runtime.store, queue: runtime.queue, clock: systemClock, log: silentLogger };
    expect(await sweepStalledRuns(deps, { stallMs: 15 * MINUTE, limit: 2, agents: ['mine'] })).toEqual([{ runId: 'mine-lost', version: 1 }]);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);
  });

  it('re-enqueues a lost run whose checkpoint a worker with its clock two hours ahead stamped, not two hours late; a run stamped within the clocks\' usual skew is left', async () => {
    resources = await createTestResources('sweep-ahead');
    // A worker off Lambda (`stepwise worker --backend aws`) on a machine whose clock runs two hours ahead
    // wrote the run's checkpoint, and then its message was lost.
    const ahead = resources.runtime({ clock: { now: () => Date.now() + 120 * MINUTE } }).store;
    await ahead.create({ ...newState('ahead-lost'), agent: 'mine' }, META);
    // And one whose clock ran ten minutes ahead: less than the stall window, which by that window alone
    // would be re-driven only after the window and the skew (seed 3754157173 of the AWS chaos schedules).
    const tenAhead = resources.runtime({ clock: { now: () => Date.now() + 10 * MINUTE } }).store;
    await tenAhead.create({ ...newState('ten-ahead-lost'), agent: 'mine' }, META);
    const slightly = resources.runtime({ clock: { now: () => Date.now() + 200 } }).store;
    await slightly.create({ ...newState('ahead-a-little'), agent: 'mine' }, META);
    const runtime = resources.runtime();
    const deps = { store: runtime.store, queue: runtime.queue, clock: systemClock, log: silentLogger };
    // Was: [] until this clock caught up two hours later (its checkpoint not older than the stall window).
    expect(await sweepStalledRuns(deps, { stallMs: 15 * MINUTE, agents: ['mine'] })).toEqual([{ runId: 'ahead-lost', version: 1 }, { runId: 'ten-ahead-lost', version: 1 }]);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(2);
  });

  it('sends its own agent\'s due timer past a full page of another agent\'s due waits, which sort first', async () => {
    resources = await createTestResources('timers-shared');
    const runtime = resources.runtime();
    const sleeping = (runId: string, agent: string, deadline: number) => {
      const decision = { step: 1, tool: 'sleep_until', input: {}, at: deadline - MINUTE };
      const wait = waitRecordFor({ kind: 'sleep', until: deadline }, decision, `wait-${runId}`, deadline - MINUTE);
      return runtime.store.create(beginWait({ ...newState(runId), agent }, wait, deadline - MINUTE), META);
    };
    // The other agent's waits came due first and are still open (their timers wait in a backlog on its
    // queue); theirs-4, -8 and -9 share mine-due's index shard, so one shard's first page is all theirs.
    for (const [i, runId] of ['theirs-1', 'theirs-4', 'theirs-8', 'theirs-9'].entries()) await sleeping(runId, 'theirs', Date.now() - (30 - i) * MINUTE);
    await sleeping('mine-due', 'mine', Date.now() - MINUTE);
    const deps = { store: runtime.store, queue: runtime.queue, clock: systemClock, log: silentLogger };
    expect((await sendDueTimers(deps, { limit: 2, agents: ['mine'] })).map((w) => w.runId)).toEqual(['mine-due']);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(1);
  });
});

describe('the sweeper at fan-out: more waits due together than a page of the store holds', () => {
  it('sends every timer in one sweep, where each sweep sent the same first page until those runs had woken', async () => {
    resources = await createTestResources('timers-fanout');
    const runtime = resources.runtime();
    // Five runs sleeping until one instant, a page of two: the first page's waits stay open (and first)
    // until their timers fire, so the other three got theirs only in the sweeps after that, a page a sweep.
    const deadline = Date.now() + 10 * MINUTE;
    const runIds = ['fan-a', 'fan-b', 'fan-c', 'fan-d', 'fan-e'];
    for (const runId of runIds) {
      const decision = { step: 1, tool: 'sleep_until', input: {}, at: deadline - 60 * MINUTE };
      const wait = waitRecordFor({ kind: 'sleep', until: deadline }, decision, `wait-${runId}`, deadline - 60 * MINUTE);
      await runtime.store.create(beginWait({ ...newState(runId), agent: 'mine' }, wait, deadline - 60 * MINUTE), META);
    }
    const deps = { store: runtime.store, queue: runtime.queue, clock: systemClock, log: silentLogger };
    expect((await sendDueTimers(deps, { limit: 2, agents: ['mine'] })).map((w) => w.runId).sort()).toEqual(runIds);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(5);
  });
});

describe('functions/sweeper.ts', () => {
  const saved = { ...process.env };
  afterEach(() => {
    process.env = { ...saved };
    vi.resetModules();
  });

  it('reads its configuration from the environment and re-enqueues runs idle longer than STEPWISE_STALL_SECONDS', async () => {
    resources = await createTestResources('sweep-fn');
    // Runs created an hour ago whose first message never went out.
    const past = resources.runtime({ clock: { now: () => Date.now() - 60 * MINUTE } }).store;
    await past.create(newState('idle-run-1'), META);
    await past.create(newState('idle-run-2'), META);
    await resources.runtime().store.create(newState('fresh-run'), META);
    Object.assign(process.env, {
      TABLE_NAME: resources.tableName, BUCKET_NAME: resources.bucketName, QUEUE_URL: resources.queueUrl,
      STEPWISE_STALL_SECONDS: '600', STEPWISE_LOG_LEVEL: 'silent',
    });
    const { handler } = await import('../../functions/sweeper.ts');
    const result = await handler();
    expect(result.requeued.map((m) => m.runId).sort()).toEqual(['idle-run-1', 'idle-run-2']);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(2);
  });

  it('refuses a STEPWISE_STALL_SECONDS that is not a finite positive number, naming it', async () => {
    resources = await createTestResources('sweep-fn-bad');
    Object.assign(process.env, {
      TABLE_NAME: resources.tableName, BUCKET_NAME: resources.bucketName, QUEUE_URL: resources.queueUrl, STEPWISE_LOG_LEVEL: 'silent',
    });
    for (const seconds of ['Infinity', '0', '-5', 'ten']) {
      process.env.STEPWISE_STALL_SECONDS = seconds;
      vi.resetModules();
      const { handler } = await import('../../functions/sweeper.ts');
      // "Infinity" reached sweepRuns, whose "stallMs must be..." named no setting.
      await expect(handler()).rejects.toThrow(`STEPWISE_STALL_SECONDS must be a positive number of seconds, got ${seconds}`);
    }
  });

  it('fails its invocation, so its alarm fires, when the queue refuses the sweep\'s messages', async () => {
    resources = await createTestResources('sweep-fn-refused');
    const past = resources.runtime({ clock: { now: () => Date.now() - 60 * MINUTE } }).store;
    await past.create(newState('lost-run-1'), META);
    await past.create(newState('lost-run-2'), META);
    // A queue that refuses every send, as one whose policy or KMS key does: here, one deleted.
    await resources.clients.sqs.send(new DeleteQueueCommand({ QueueUrl: resources.queueUrl }));
    Object.assign(process.env, {
      TABLE_NAME: resources.tableName, BUCKET_NAME: resources.bucketName, QUEUE_URL: resources.queueUrl,
      STEPWISE_STALL_SECONDS: '600', STEPWISE_LOG_LEVEL: 'silent',
    });
    vi.resetModules();
    const { handler } = await import('../../functions/sweeper.ts');
    // It returned as any good sweep did: the SweeperErrors alarm never fired, and the runs stayed lost.
    await expect(handler()).rejects.toThrow("the queue refused 2 of this sweep's messages (requeue-failed and timer-send-failed lines say why)");
  });
});
