import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sweepRuns } from '../../lib/aws.ts';
import { SQS_MAX_TIMER_MS } from '../../lib/aws/wait-services.ts';
import { decodeState } from '../../lib/core/codec.ts';
import type { RunState } from '../../lib/core/state.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { sweepRunsAndTimers } from '../../lib/engine/sweep.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { InvalidInputError, runWorker as publicRunWorker } from '../../lib/index.ts';
import { silentLogger } from '../../lib/log.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { META, newState } from '../support/states.ts';
import { OneWaitModel, waitAgent } from '../support/wait-agent.ts';
import { createTestResources, queueDepth, type TestResources } from './aws-fixtures.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

const MINUTE = 60_000;

/**
 * Off Lambda there is no scheduled sweeper function: a worker on the AWS backend does its work itself
 * (runWorker's `sweep`, which `stepwise worker --backend aws` sets to sweepRunsAndTimers).
 */
describe('a worker on the AWS backend does the sweeper function\'s work', () => {
  it('a wait too long for SQS to hold its timer: the worker loop\'s sweep sends it when due, and the run goes on', { timeout: 60_000 }, async () => {
    resources = await createTestResources('worker-sweep-timer');
    const runtime = resources.runtime();
    let offset = 0; // how far this test has moved time on
    const clock = { now: () => Date.now() + offset };
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
      model: new OneWaitModel({ kind: 'tool', tool: 'sleep_until', input: { seconds: 20 * 60 } }),
      agent: waitAgent(new FakeRows(), []), clock, workerId: 'aws-worker', codeVersion: 'test', log: silentLogger,
      waits: { maxTimerMs: SQS_MAX_TIMER_MS },
    };
    const state = async (): Promise<RunState> => decodeState((await runtime.store.load('nap'))!);
    const work = (sweep?: () => Promise<unknown>) => runWorker(deps, runtime.queue, { waitMs: 1000, idleExitMs: 2500, ...(sweep ? { sweep } : {}) });

    await runtime.store.create({ ...newState('nap'), agent: 'wait-agent' }, META);
    await runtime.queue.send({ runId: 'nap', version: 1 });
    await work();
    expect(await state()).toMatchObject({ status: 'waiting', wait: { kind: 'sleep' } });
    // 20 minutes is past SQS's 15: nothing was queued for it.
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);

    // Past the deadline, a worker without the sweep leaves the run waiting for good...
    offset = 20 * MINUTE + 1000;
    await work();
    expect((await state()).status).toBe('waiting');
    // ...and one with it sends the timer, then takes it: the run wakes and completes.
    await work(() => sweepRunsAndTimers(deps, { stallMs: 15 * MINUTE, agents: ['wait-agent'] }));
    const done = await state();
    expect(done.status).toBe('completed');
    expect(done.steps[0]!.result.text).toContain('woke');
  });

  it('a program of its own has that sweep from stepwise/aws: sweepRuns as runWorker\'s sweep, for its agent\'s runs only', { timeout: 60_000 }, async () => {
    resources = await createTestResources('worker-sweep-public');
    let offset = 0;
    const clock = { now: () => Date.now() + offset };
    const runtime = resources.runtime({ clock });
    const agent = waitAgent(new FakeRows(), []);
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
      model: new OneWaitModel({ kind: 'tool', tool: 'sleep_until', input: { seconds: 20 * 60 } }),
      agent, clock, workerId: 'own-worker', codeVersion: 'test', log: silentLogger, waits: { maxTimerMs: SQS_MAX_TIMER_MS },
    };
    const work = () => publicRunWorker(deps, runtime.queue, {
      waitMs: 1000, idleExitMs: 2500, sweep: () => sweepRuns(runtime, { agent, clock, log: silentLogger }),
    });
    await runtime.store.create({ ...newState('nap'), agent: 'wait-agent' }, META);
    await runtime.queue.send({ runId: 'nap', version: 1 });
    await work();
    expect((await runtime.store.load('nap'))?.status).toBe('waiting');
    // Two runs whose first message never went out: this agent's, and another agent's that shares the table.
    await runtime.store.create({ ...newState('lost'), agent: 'wait-agent' }, META);
    await runtime.store.create({ ...newState('theirs'), agent: 'other-agent' }, META);

    offset = 20 * MINUTE + 1000;
    await work();
    const nap = decodeState((await runtime.store.load('nap'))!);
    expect(nap.status).toBe('completed');
    expect(nap.steps[0]!.result.text).toContain('woke');
    // The lost run was re-driven and took its first step (a sleep of its own).
    expect(decodeState((await runtime.store.load('lost'))!)).toMatchObject({ status: 'waiting', wait: { kind: 'sleep' } });
    // The other agent's run is its own sweeper's: never put on this agent's queue.
    expect((await runtime.store.load('theirs'))).toMatchObject({ status: 'running', version: 1 });
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    // A stall window of 0 would re-drive every run inside a step, at every sweep.
    const refused = sweepRuns(runtime, { stallMs: 0 });
    await expect(refused).rejects.toBeInstanceOf(InvalidInputError);
    await expect(refused).rejects.toThrow('stallMs must be a number of milliseconds above 0, not 0');
  });

  it('`stepwise worker --backend aws` re-drives a run whose message was lost, after --stall-ms', { timeout: 90_000 }, async () => {
    resources = await createTestResources('worker-sweep-cli');
    // A run created an hour ago whose first message never went out.
    const past = resources.runtime({ clock: { now: () => Date.now() - 60 * MINUTE } }).store;
    await past.create({ ...newState('lost-1', 'echo twice'), agent: 'fixture-echo' }, META);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    const worker = await stepwiseCli([
      'worker', '--agent', join(ROOT, 'test/aws/fixture-agent.ts'), '--stall-ms', '30000', '--idle-exit-ms', '4000',
      '--backend', 'aws', '--table', resources.tableName, '--bucket', resources.bucketName, '--queue-url', resources.queueUrl,
    ], { STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' });
    expect(worker.code, worker.err).toBe(0);
    expect(worker.out).toMatch(/^run lost-1 v\d+ {2}completed after 2 steps: echoed twice$/m);
    expect(worker.err).toContain('stalled run re-enqueued');
  });
});
