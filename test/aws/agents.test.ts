import { ChangeMessageVisibilityCommand } from '@aws-sdk/client-sqs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { ensureQueue } from '../../lib/aws/provision.ts';
import { SqsRunQueue } from '../../lib/aws/sqs-run-queue.ts';
import { sweepStalledRuns } from '../../lib/engine/sweep.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { silentLogger } from '../../lib/log.ts';
import { ROOT } from '../support/cli.ts';
import { META, newState } from '../support/states.ts';
import { createTestResources, receiveAll, startTestRun, uniqueName, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce } from './lambda-harness.ts';
import { captureLogs } from './log-capture.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

const HOUR = 3600_000;

describe('several agents on one AWS stack', () => {
  it('a worker Lambda of another agent hands the message back for a minute and never steps the run', async () => {
    resources = await createTestResources('wrong-agent');
    const db = new FakeDatabase();
    const agent = writeRowsAgent(db);
    const runId = await startTestRun(resources.runtime(), agent, 'rows-run');
    const dropped: string[] = [];
    const cleanup = defineAgent({
      name: 'cleanup-tables',
      tools: [tool({ name: 'drop_table', description: 'Drop a table.', input: z.object({ table: z.string() }), sideEffect: true, run: ({ table }) => { dropped.push(table); } })],
    });
    const logs = captureLogs();
    const dropper = { name: 'dropper', decide: async () => ({ kind: 'tool' as const, tool: 'drop_table', input: { table: 'rows' } }) };
    const wrong = new WorkerProcess({ resources, agent: cleanup, model: dropper, log: logs.log });
    try {
      const poll = await pollOnce(resources.clients, resources.queueUrl, wrong);
      expect(dropped).toEqual([]);
      expect(poll.failures).toEqual(poll.records.map((r) => r.messageId));
      expect(poll.records).toHaveLength(1);
      // Handed back: hidden for a minute, so the wrong worker does not spin on it.
      expect(await receiveAll(resources.clients, resources.queueUrl)).toEqual([]);
      expect(logs.lines.find((l) => l.event === 'wrong-agent')).toMatchObject({ runId, runAgent: 'write-rows', workerAgent: 'cleanup-tables', workerId: poll.requestId });
      expect(db.applied.size).toBe(0);
      expect(await resources.runtime().store.history(runId)).toHaveLength(1);
      // The right agent's worker takes it once it is visible again.
      await resources.clients.sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: resources.queueUrl, ReceiptHandle: poll.records[0]!.receiptHandle, VisibilityTimeout: 0 }));
      await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources: resources!, agent, model: new ScriptedModel({ steps: 2 }) }) });
      expect(decodeState((await resources.runtime().store.load(runId))!)).toMatchObject({ status: 'completed', agent: 'write-rows' });
    } finally {
      wrong.close();
    }
  });

  it('the sweeper of one agent re-enqueues only that agent\'s stalled runs, on its own queue', async () => {
    resources = await createTestResources('sweep-agents');
    const past = resources.runtime({ clock: { now: () => Date.now() - HOUR } }).store;
    await past.create(newState('mine-1'), META); // agent test-agent
    await past.create({ ...newState('theirs-1'), agent: 'other-agent' }, META);
    const theirQueue = await ensureQueue(resources.clients.sqs, `stepwise-${uniqueName('other')}`);
    const mine = resources.runtime();
    const requeued = await sweepStalledRuns(
      { store: mine.store, queue: mine.queue, clock: { now: () => Date.now() }, log: silentLogger },
      { stallMs: 10 * 60_000, agents: ['test-agent'] },
    );
    expect(requeued).toEqual([{ runId: 'mine-1', version: 1 }]);
    expect((await receiveAll(resources.clients, resources.queueUrl)).map((m) => JSON.parse(m.Body!).runId)).toEqual(['mine-1']);
    expect(await receiveAll(resources.clients, theirQueue.queueUrl)).toEqual([]);
    // The other agent's sweeper, on its queue, takes its own.
    const theirs = new SqsRunQueue({ sqs: resources.clients.sqs, queueUrl: theirQueue.queueUrl });
    expect(await sweepStalledRuns(
      { store: mine.store, queue: theirs, clock: { now: () => Date.now() }, log: silentLogger },
      { stallMs: 10 * 60_000, agents: ['other-agent'] },
    )).toEqual([{ runId: 'theirs-1', version: 1 }]);
  });
});

describe('functions/sweeper.ts with STEPWISE_AGENT', () => {
  const saved = { ...process.env };
  afterEach(() => {
    process.env = { ...saved };
    vi.resetModules();
  });

  it('sweeps only the runs of that agent', async () => {
    resources = await createTestResources('sweep-fn-agent');
    const past = resources.runtime({ clock: { now: () => Date.now() - HOUR } }).store;
    await past.create({ ...newState('echo-run'), agent: 'fixture-echo' }, META);
    await past.create({ ...newState('other-run'), agent: 'other-agent' }, META);
    Object.assign(process.env, {
      TABLE_NAME: resources.tableName, BUCKET_NAME: resources.bucketName, QUEUE_URL: resources.queueUrl,
      STEPWISE_STALL_SECONDS: '600', STEPWISE_LOG_LEVEL: 'silent', STEPWISE_AGENT: join(ROOT, 'test/aws/fixture-agent.ts'),
    });
    const { handler } = await import('../../functions/sweeper.ts');
    expect((await handler()).requeued).toEqual([{ runId: 'echo-run', version: 1 }]);
  });
});
