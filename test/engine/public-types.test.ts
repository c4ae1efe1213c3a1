import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import {
  advance, defineAgent, runWorker, startRun, tool,
  type Advance, type Clock, type Delivery, type EngineDeps, type Model, type RunQueue, type RunQueueConsumer, type StartResult, type WorkerOptions,
} from '../../lib/index.ts';
import { openLocalRuntime } from '../../lib/local.ts';
import { tempDb } from '../support/harness.ts';

/**
 * The README promises the types of startRun, advance, handleDelivery and runWorker from `stepwise`: a
 * program that wraps the queue (to count, to trace) names them from there, not from files inside the
 * package, which its exports map does not let it import. This file type-checks only while they are exported.
 */
const agent = defineAgent({
  name: 'typed',
  tools: [tool({ name: 'note', description: 'Note it.', input: z.object({}), sideEffect: false, run: () => 'noted' })],
});
const model: Model = { name: 'typed-scripted', decide: async (r) => (r.step < 3 ? { kind: 'tool', tool: 'note', input: {} } : { kind: 'done', summary: 'noted twice' }) };
const cleanups: (() => void)[] = [];
afterEach(() => { for (const c of cleanups.splice(0)) c(); });

function open(): { deps: EngineDeps; consumer: RunQueueConsumer; received: Delivery[]; sent: number[] } {
  const db = tempDb();
  const runtime = openLocalRuntime({ dbPath: db.path });
  cleanups.push(() => { runtime.close(); db.cleanup(); });
  const sent: number[] = [];
  const received: Delivery[] = [];
  const queue: RunQueue = {
    send: (message, options) => { sent.push(message.version); return runtime.queue.send(message, options); },
    redrive: (message, options) => runtime.queue.redrive(message, options),
  };
  const consumer: RunQueueConsumer = {
    receive: async (options) => { const got = await runtime.queue.receive(options); received.push(...got); return got; },
    ack: (delivery) => runtime.queue.ack(delivery),
    release: (delivery, delayMs) => runtime.queue.release(delivery, delayMs),
  };
  const clock: Clock = { now: () => Date.now() };
  const deps: EngineDeps = {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue, model, agent, clock,
    workerId: 'typed-1', codeVersion: 'test', log: pino({ level: 'silent' }),
  };
  return { deps, consumer, received, sent };
}

describe('the public types of the embedding functions', () => {
  it('a wrapped queue and consumer, typed from stepwise, work a run to its end', async () => {
    const { deps, consumer, received, sent } = open();
    const started: StartResult = await startRun(deps, { goal: 'note twice', runId: 'typed-run' });
    expect(started).toEqual({ runId: 'typed-run', created: true, version: 1 });
    // The local store carries the first message in the create's transaction, as it carries every step's: none goes through the wrapper.
    expect(sent).toEqual([]);
    let last: Advance | undefined;
    const options: WorkerOptions = { waitMs: 50, onHandled: (h) => { if (h.action === 'ack') last = h.outcome; return last?.kind === 'advanced' && last.state.status !== 'running'; } };
    await runWorker(deps, consumer, options);
    expect(last?.kind === 'advanced' && last.state.status).toBe('completed');
    expect(received.length).toBeGreaterThan(0);
    const again: Advance = await advance(deps, 'typed-run');
    expect(again).toMatchObject({ kind: 'idle', status: 'completed' });
  });
});
