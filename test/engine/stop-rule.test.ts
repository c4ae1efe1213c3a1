import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { PermanentError, TransientError } from '../../lib/core/errors.ts';
import { DEFAULT_MAX_RECEIVES, handleDelivery } from '../../lib/engine/handle-message.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { captureLogs } from '../aws/log-capture.ts';

describe('the stop rule, end to end', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  function setup(agent = rowsAgent(new FakeRows()), script: (step: number, prompt: string) => ModelReply = writeRowsScript(3)) {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(script);
    const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    return { ...w, clock, model };
  }

  it('completes when the model says DONE, storing its summary', async () => {
    const { deps, runtime, clock } = setup();
    await start(deps);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 3, summary: 'Wrote 3 rows, one per step.' });
    expect(state.usage.inputTokens).toBe(300);
  });

  it('stops at the step cap: the model is asked once more, and only DONE would complete the run', async () => {
    const rows = new FakeRows();
    const { deps, runtime, clock, model } = setup(rowsAgent(rows, { stepCap: 4 }), writeRowsScript(100));
    await start(deps);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'capped', step: 4, stepCap: 4, reason: 'step cap of 4 reached before the goal was done' });
    expect(model.stepsAsked()).toEqual([1, 2, 3, 4, 5]);
    // The fifth call asked for a fifth row: it was not written.
    expect(rows.rows.size).toBe(4);
  });

  it('stops at the default step cap of 60 when neither the start nor the agent sets one', async () => {
    const rows = new FakeRows();
    const { deps, runtime, clock, model } = setup(rowsAgent(rows), writeRowsScript(100));
    await start(deps);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'capped', step: 60, stepCap: 60, reason: 'step cap of 60 reached before the goal was done' });
    expect(model.stepsAsked()).toEqual(Array.from({ length: 61 }, (_, i) => i + 1));
    expect(rows.rows.size).toBe(60);
  });

  it('fails the run when a step fails 3 times, keeping its last checkpoint and retrying the same call', async () => {
    const attempts: { step: number; attempt: number; key: string; input: unknown }[] = [];
    const agent = defineAgent({
      name: 'flaky', tools: [tool({
        name: 'write_row', description: 'fails on step 2', input: z.object({ row: z.number() }), sideEffect: true,
        run: (input, ctx) => {
          attempts.push({ step: ctx.step, attempt: ctx.attempt, key: ctx.idempotencyKey, input });
          if (ctx.step === 2) throw new Error('database unavailable');
          return 'ok';
        },
      })],
    });
    const { deps, runtime, clock, model } = setup(agent);
    await start(deps);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'failed', step: 1, failures: 3, reason: 'step 2 failed 3 times; last error: database unavailable' });
    expect(attempts.filter((a) => a.step === 2)).toEqual([1, 2, 3].map((attempt) => ({ step: 2, attempt, key: 'run/step-2', input: { row: 2 } })));
    // The decision was recorded once: retries replay it instead of asking the model again.
    expect(model.stepsAsked()).toEqual([1, 2]);
    const history = await runtime.store.history('run');
    expect(history.map((h) => h.status)).toEqual(['running', 'running', 'running', 'running', 'failed']);
    expect(runtime.queue.depth()).toBe(0);
  });

  it('recovers when a step fails fewer than 3 times, resetting the count', async () => {
    let failuresLeft = 2;
    const agent = defineAgent({
      name: 'flaky-twice', tools: [tool({
        name: 'write_row', description: 'fails twice', input: z.object({ row: z.number() }), sideEffect: false,
        run: () => { if (failuresLeft-- > 0) throw new Error('try again'); return 'ok'; },
      })],
    });
    const { deps, runtime, clock } = setup(agent);
    await start(deps);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 3, failures: 0 });
  });

  it('counts transient model errors as failures and fails at once on a permanent one', async () => {
    let calls = 0;
    const transient = setup(rowsAgent(new FakeRows()), () => { calls++; throw new TransientError('529 overloaded'); });
    await start(transient.deps);
    await drain(transient.deps, transient.runtime, transient.clock);
    expect(await loadState(transient.runtime)).toMatchObject({ status: 'failed', failures: 3, reason: expect.stringContaining('529 overloaded') });
    expect(calls).toBe(3);
    db.cleanup();

    const permanent = setup(rowsAgent(new FakeRows()), () => { throw new PermanentError('authentication failed: invalid x-api-key'); });
    const { log, lines } = captureLogs();
    await start(permanent.deps);
    await drain({ ...permanent.deps, log }, permanent.runtime, permanent.clock);
    expect(await loadState(permanent.runtime)).toMatchObject({ status: 'failed', failures: 1, reason: 'step 1: authentication failed: invalid x-api-key' });
    // An operator's to look at: a warning, which the pretty log (warnings and errors only) shows.
    expect(lines.filter((l) => l.event === 'checkpoint')).toEqual([expect.objectContaining({
      level: 40, status: 'failed', runId: 'run', msg: 'run run failed: step 1: authentication failed: invalid x-api-key',
    })]);
  });

  it('fails a run whose step message keeps coming back without finishing (a step that kills its worker)', async () => {
    const { deps, runtime, clock } = setup();
    await start(deps);
    // Each try dies inside the step (the worker is killed after the tool ran); the message comes back.
    const killed = { ...deps, probe: (point: string) => { if (point === 'C4') throw new Error('worker killed'); } };
    let handled;
    for (let delivery = 1; delivery <= DEFAULT_MAX_RECEIVES + 1; delivery++) {
      clock.advance(VISIBILITY_MS + 1);
      const [received] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      expect(received!.receiveCount).toBe(delivery);
      if (delivery <= DEFAULT_MAX_RECEIVES) await expect(handleDelivery(killed, received!)).rejects.toThrow('worker killed');
      else handled = await handleDelivery(killed, received!);
    }
    expect(handled?.action).toBe('ack');
    expect(await loadState(runtime)).toMatchObject({
      status: 'failed', step: 0,
      reason: `step 1: it was started ${DEFAULT_MAX_RECEIVES + 1} times without finishing (its worker keeps crashing, in or after its recorded call of tool write_row)`,
    });
  });
});

