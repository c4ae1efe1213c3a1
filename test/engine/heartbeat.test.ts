import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { startRun } from '../../lib/engine/start.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { silentLogger } from '../../lib/log.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { systemClock, type Delivery, type RunQueueConsumer } from '../../lib/ports.ts';
import { tempDb } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * Another worker polling the queue every 20 ms while `busy()` says a step is in progress: what it got (and
 * released at once) is what a heartbeat failed to keep hidden.
 */
function stealWhile(other: LocalRuntime, busy: () => boolean): { stop(): Promise<string[]> } {
  const stolen: string[] = [];
  let polling = true;
  const loop = (async () => {
    while (polling) {
      if (busy()) {
        const [d] = await other.queue.receive({ visibilityMs: 1000 });
        if (d) { stolen.push(d.body); await other.queue.release(d, 0); }
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return { stop: async () => { polling = false; await loop; return stolen; } };
}

describe('the worker heartbeat', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('keeps a step that outlasts the visibility timeout hidden from other workers until it finishes', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path });
    const other = openLocalRuntime({ dbPath: db.path });
    const calls: number[] = [];
    let stepRunning = false;
    const agent = defineAgent({
      name: 'slow', tools: [tool({
        name: 'write_row', description: 'takes 3 visibility timeouts', input: z.object({ row: z.number() }), sideEffect: true,
        run: async (input) => {
          calls.push(input.row);
          stepRunning = true;
          await new Promise((r) => setTimeout(r, 3000));
          stepRunning = false;
          return 'ok';
        },
      })],
    });
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model: new StubModel(writeRowsScript(1)),
      agent, clock: systemClock, workerId: 'slow-worker', codeVersion: 'test', log: silentLogger,
    };
    await startRun(deps, { goal: 'one slow row', runId: 'slow' });

    // Another worker polls all the while; it must never get the message of the step in progress.
    const poller = stealWhile(other, () => stepRunning);
    // Real timers: the heartbeat renews every third of the visibility timeout. A second of visibility
    // leaves room for a loaded machine's event-loop stalls (each durable commit blocks the thread).
    await runWorker(deps, runtime.queue, {
      visibilityMs: 1000, waitMs: 50,
      onHandled: (h) => h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status !== 'running',
    });
    const stolen = await poller.stop();

    expect(stolen).toEqual([]);
    expect(calls).toEqual([1]);
    expect((await runtime.store.load('slow'))?.status).toBe('completed');
    runtime.close(); other.close();
  });

  it('at concurrency 2, renews both steps in progress: neither outlasting the visibility timeout is taken by another worker', async () => {
    db = tempDb();
    const runtime = openLocalRuntime({ dbPath: db.path });
    const other = openLocalRuntime({ dbPath: db.path });
    const calls: string[] = [];
    let running = 0;
    let most = 0;
    const agent = defineAgent({
      name: 'slow', tools: [tool({
        name: 'write_row', description: 'takes 3 visibility timeouts', input: z.object({ row: z.number() }), sideEffect: true,
        run: async (_input, ctx) => {
          calls.push(ctx.runId);
          most = Math.max(most, ++running);
          await new Promise((r) => setTimeout(r, 3000));
          running--;
          return 'ok';
        },
      })],
    });
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model: new StubModel(writeRowsScript(1)),
      agent, clock: systemClock, workerId: 'slow-worker', codeVersion: 'test', log: silentLogger,
    };
    await startRun(deps, { goal: 'one slow row', runId: 'slow-a' });
    await startRun(deps, { goal: 'one slow row', runId: 'slow-b' });

    const poller = stealWhile(other, () => running > 0);
    let finished = 0;
    await runWorker(deps, runtime.queue, {
      visibilityMs: 1000, waitMs: 50, concurrency: 2,
      onHandled: (h) => h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status !== 'running' && ++finished === 2,
    });
    const stolen = await poller.stop();

    expect(most).toBe(2);
    expect(stolen).toEqual([]);
    expect(calls.sort()).toEqual(['slow-a', 'slow-b']);
    for (const runId of ['slow-a', 'slow-b']) expect((await runtime.store.load(runId))?.status).toBe('completed');
    runtime.close(); other.close();
  });

  it('a delivery that arrives after the worker was stopped is handed back, not started', async () => {
    const stop = new AbortController();
    const delivery = { body: JSON.stringify({ runId: 'r', version: 1 }), receipt: 'x', receiveCount: 1 } as Delivery;
    const handedBack: Delivery[] = [];
    let stepped = false;
    // The stop comes while the receive waits: SIGTERM during a long poll.
    const consumer: RunQueueConsumer = {
      receive: async () => { stop.abort(); return [delivery]; },
      ack: async () => true,
      release: async () => { stepped = true; },
      handBack: async (d) => { handedBack.push(d); return true; },
    };
    const deps = { clock: systemClock, log: silentLogger, store: { load: async () => { stepped = true; return undefined; } } } as unknown as EngineDeps;
    await runWorker(deps, consumer, { waitMs: 0, sweepEveryMs: 0, signal: stop.signal });
    expect(handedBack).toEqual([delivery]);
    expect(stepped).toBe(false);
  });

  it('is one timer for the loop, gone when the loop returns or throws (a stopped worker process can exit)', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const stop = new AbortController();
    let armed = -1;
    let receives = 0;
    // An empty queue that takes no timer of its own: what is armed while the loop polls is the heartbeat.
    const empty: RunQueueConsumer = {
      receive: async () => {
        if (++receives === 3) { armed = timers() - before; stop.abort(); }
        return [];
      },
      ack: async () => true,
      release: async () => {},
    };
    const deps = { clock: systemClock, log: silentLogger } as unknown as EngineDeps;
    await runWorker(deps, empty, { waitMs: 0, sweepEveryMs: 0, signal: stop.signal });
    expect(armed).toBe(1);
    expect(timers()).toBe(before);

    const broken: RunQueueConsumer = { ...empty, receive: async () => { throw new Error('queue gone'); } };
    await expect(runWorker(deps, broken, { waitMs: 0, sweepEveryMs: 0 })).rejects.toThrow('queue gone');
    expect(timers()).toBe(before);
  });

  it('takes a visibility timeout past a timer\'s limit (about 24.8 days a third) as that limit, not as a renewal every millisecond', async () => {
    const stop = new AbortController();
    const delivery = { body: JSON.stringify({ runId: 'r', version: 1 }), receipt: 'x', receiveCount: 1 } as Delivery;
    let stepping = false;
    let renewals = 0;
    let received = false;
    const consumer: RunQueueConsumer = {
      receive: async () => {
        if (received) { stop.abort(); return []; }
        received = true;
        return [delivery];
      },
      ack: async () => true,
      release: async () => { if (stepping) renewals += 1; },
    };
    // A step of 300 ms: its load is slow, then finds no run.
    const load = async () => {
      stepping = true;
      await new Promise((r) => setTimeout(r, 300));
      stepping = false;
      return undefined;
    };
    const deps = { clock: systemClock, log: silentLogger, workerId: 'w', store: { load } } as unknown as EngineDeps;
    // Node arms a timer past 2^31 - 1 ms to fire after 1 ms instead (TimeoutOverflowWarning).
    await runWorker(deps, consumer, { waitMs: 0, sweepEveryMs: 0, signal: stop.signal, visibilityMs: 100 * 86_400_000 });
    expect(renewals).toBe(0);
  });
});
