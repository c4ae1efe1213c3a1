import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { PermanentError } from '../../lib/core/errors.ts';
import { checkInvariants, type RunExpectation } from '../../bench/chaos/invariants.ts';
import { ManualClock, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

const toolOf = () => 'write_row';

/** A clean 3-step run on a real SQLite runtime, with the applications its tool made. */
async function cleanRun(db: ReturnType<typeof tempDb>) {
  const applied = new Map<string, number>();
  const agent = defineAgent({
    name: 'inv', tools: [tool({
      name: 'write_row', description: 'w', input: z.object({ n: z.number().int() }), sideEffect: true,
      run: (input, ctx) => { applied.set(ctx.idempotencyKey, (applied.get(ctx.idempotencyKey) ?? 0) + 1); return input; },
    })],
  });
  const model = new StubModel((n) => (n <= 3 ? { kind: 'tool', tool: 'write_row', input: { n } } : { kind: 'done', summary: 'done' }));
  const clock = new ManualClock();
  const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
  await start(w.deps, 'go', 'run');
  await drain(w.deps, w.runtime, clock);
  const runs: RunExpectation[] = [{ runId: 'run', steps: 3, toolOf }];
  return { applied, runtime: w.runtime, runs };
}

describe('the chaos invariants', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());
  const injected = (reason: string) => reason.includes('injected');

  it('a clean run passes', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    const verdict = await checkInvariants({ store: runtime.store, runs, applied, injected });
    expect(verdict.violations).toEqual([]);
    expect(verdict).toMatchObject({ completed: 1, completedSteps: 3, appliedTwice: 0, stepsLost: 0, stuck: 0 });
    runtime.close();
  });

  it('flags an effect applied twice, a completed step never applied, and an effect no completed step has', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    applied.set('run/step-1', 2);
    applied.delete('run/step-2');
    applied.set('run/step-9', 1);
    const verdict = await checkInvariants({ store: runtime.store, runs, applied, injected });
    expect(verdict.appliedTwice).toBe(1);
    expect(verdict.stepsLost).toBe(1);
    expect(verdict.violations.map((v) => v.kind).sort()).toEqual(['applied-twice', 'phantom-effect', 'step-lost']);
    runtime.close();
  });

  it('flags a version missing from the history and a skipped step', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    runtime.db.prepare('DELETE FROM checkpoints WHERE run_id = ? AND version = 3').run('run');
    const verdict = await checkInvariants({ store: runtime.store, runs: [{ ...runs[0]!, steps: 4 }], applied, injected });
    expect(verdict.violations.map((v) => v.kind)).toEqual(expect.arrayContaining(['history', 'incomplete']));
    expect(verdict.stepsLost).toBe(1);
    runtime.close();
  });

  it('flags a step that did something other than its own work (a repeated step)', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    const verdict = await checkInvariants({ store: runtime.store, runs: [{ ...runs[0]!, toolOf: (n) => (n === 2 ? 'notify' : 'write_row') }], applied, injected });
    expect(verdict.violations.map((v) => v.kind)).toEqual(['steps']);
    runtime.close();
  });

  it('flags a run left running with nothing to move it, and a run failed for a fault nobody injected', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    const clock = new ManualClock();
    const failing = new StubModel(() => { throw new PermanentError('disk full'); });
    const w = workerProcess({ dbPath: db.path, agent: defineAgent({ name: 'inv', tools: [] }), model: failing, clock, workerId: 'B' });
    // 'lost': its first message is consumed without a step, so nothing will ever move it.
    await start(w.deps, 'go', 'lost');
    const [message] = await w.runtime.queue.receive();
    await w.runtime.queue.ack(message!);
    await start(w.deps, 'go', 'broken');
    await drain(w.deps, w.runtime, clock);
    const verdict = await checkInvariants({
      store: runtime.store, runs: [...runs, { runId: 'lost', steps: 3, toolOf }, { runId: 'broken', steps: 3, toolOf }], applied, injected,
    });
    expect(verdict.stuck).toBe(1);
    expect(verdict.violations.map((v) => [v.runId, v.kind])).toEqual([['lost', 'stuck'], ['broken', 'reason']]);
    w.runtime.close(); runtime.close();
  });
});
