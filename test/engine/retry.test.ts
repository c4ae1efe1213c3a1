import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { advance } from '../../lib/engine/advance.ts';
import { cancelRun } from '../../lib/engine/operate/cancel.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

describe('retry', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('continues a failed run from its last checkpoint with fresh failure counts, running the recorded call with its key', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const attempts: string[] = [];
    let down = true;
    const agent = defineAgent({
      name: 'flaky', tools: [tool({
        name: 'write_row', description: 'fails on step 2 while the database is down', input: z.object({ row: z.number() }), sideEffect: true,
        run: (input, ctx) => {
          attempts.push(`${ctx.idempotencyKey}#${ctx.attempt}`);
          if (ctx.step === 2 && down) throw new Error('database unavailable');
          return 'ok';
        },
      })],
    });
    const model = new StubModel(writeRowsScript(3));
    const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(w.deps);
    await drain(w.deps, w.runtime, clock);
    const failed = await loadState(w.runtime);
    expect(failed).toMatchObject({ status: 'failed', step: 1, failures: 3 });

    down = false;
    const retried = await retryRun({ ...w.deps, workerId: 'operator' }, 'run', {});
    expect(retried).toMatchObject({ runId: 'run', from: 'failed', version: 6, stepCap: 60 });
    const running = await loadState(w.runtime);
    expect(running).toMatchObject({ status: 'running', step: 1, failures: 0 });
    expect(running.lastError).toBeUndefined();
    expect(running.reason).toBeUndefined();
    // The recorded decision is still the next step's: the retry runs that call, under the same key.
    expect(running.pending).toMatchObject({ step: 2, idempotencyKey: 'run/step-2' });
    expect((await w.runtime.store.history('run')).at(-1)).toMatchObject({ version: 6, step: 1, status: 'running', workerId: 'operator' });

    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'completed', step: 3 });
    expect(attempts.filter((a) => a.startsWith('run/step-2'))).toEqual(['run/step-2#1', 'run/step-2#2', 'run/step-2#3', 'run/step-2#1']);
    expect(model.stepsAsked()).toEqual([1, 2, 3, 4]);
    w.runtime.close();
  });

  it('continues a capped run with a raised cap: half the cap again, at least 10, or the one given', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows, { stepCap: 2 }), model: new StubModel(writeRowsScript(14)), clock, workerId: 'A' });
    await start(w.deps);
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'capped', step: 2 });
    await expect(retryRun(w.deps, 'run', { stepCap: 2 })).rejects.toThrow(/a step cap of 2 leaves run run no step to take/);
    expect(await retryRun(w.deps, 'run', {})).toMatchObject({ from: 'capped', stepCap: 12 });
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'capped', step: 12, stepCap: 12 });
    expect(await retryRun(w.deps, 'run', { stepCap: 20 })).toMatchObject({ stepCap: 20 });
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'completed', step: 14 });
    expect(rows.rows.size).toBe(14);
    w.runtime.close();
  });

  it('refuses a run that is running, completed, cancelled, unknown or unreadable, and changes nothing', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    await start(w.deps);
    // Said with the cap it goes on with: a retry that lost to another one at once learns its options were not applied.
    await expect(retryRun(w.deps, 'run', { stepCap: 20 })).rejects.toThrow(
      'run run is running (at step 0 of at most 60: nothing of this retry was applied; another may have just continued it); only a failed, capped, over-budget run can be retried',
    );
    await drain(w.deps, w.runtime, clock);
    await expect(retryRun(w.deps, 'run', {})).rejects.toThrow(/is completed/);
    await start(w.deps, 'goal', 'stop-me');
    await cancelRun(w.deps, 'stop-me', { by: 'ops' });
    await drain(w.deps, w.runtime, clock);
    await expect(retryRun(w.deps, 'stop-me', {})).rejects.toThrow(/is cancelled/);
    await expect(retryRun(w.deps, 'nobody', {})).rejects.toThrow(/unknown run: nobody/);

    await start(w.deps, 'goal', 'broken');
    w.runtime.db.prepare("UPDATE checkpoints SET head = '{not json' WHERE run_id = 'broken'").run();
    expect(await advance(w.deps, 'broken')).toMatchObject({ kind: 'idle', status: 'failed' });
    const before = await w.runtime.store.history('broken');
    await expect(retryRun(w.deps, 'broken', {})).rejects.toThrow(/cannot retry run broken: its latest checkpoint cannot be read/);
    expect(await w.runtime.store.history('broken')).toEqual(before);
    w.runtime.close();
  });

  it('two retries of one run at once: one continues it, the other is told it is running', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows(), { stepCap: 1 }), model: new StubModel(writeRowsScript(3)), clock, workerId: 'A' });
    await start(w.deps);
    await drain(w.deps, w.runtime, clock);
    const results = await Promise.allSettled([retryRun(w.deps, 'run', {}), retryRun(w.deps, 'run', {})]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(String(rejected.reason)).toMatch(/is running/);
    expect((await w.runtime.store.history('run')).map((h) => h.status)).toEqual(['running', 'running', 'capped', 'running']);
    w.runtime.close();
  });
});
