import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { decodeState, type StoredCheckpoint } from '../../lib/core/codec.ts';
import { ToolError } from '../../lib/core/errors.ts';
import { CONDENSE_AFTER, condensedBlocks } from '../../lib/core/condense.ts';
import { summariesDue } from '../../lib/core/condensed.ts';
import { promptText, renderStepPrompt } from '../../lib/core/prompt.ts';
import { advance } from '../../lib/engine/advance.ts';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { stepCacheOf } from '../../lib/engine/step-cache.ts';
import type { CheckpointStore, Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { startRun } from '../../lib/engine/start.ts';
import { completeStep, initialState } from '../../lib/core/transitions.ts';
import type { RunState } from '../../lib/core/state.ts';
import { META, recordFor } from '../support/states.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';

/** A model that always calls `copy` and keeps every prompt it was sent, by step. */
class CopyModel implements Model {
  readonly name = 'copy-model';
  readonly prompts = new Map<number, string>();
  async decide(request: ModelRequest): Promise<ModelReply> {
    this.prompts.set(request.step, promptText(request.prompt));
    return { kind: 'tool', tool: 'copy', input: { batch: request.step }, usage: { inputTokens: 10, outputTokens: 2, cacheWriteTokens: 0, cacheReadTokens: 0 }, model: 'claude-opus-5-5' };
  }
}

const agent = defineAgent({
  name: 'copy-agent', settings: { stepCap: 1000 },
  tools: [tool({
    name: 'copy', description: 'copies a batch', input: z.object({ batch: z.number() }), sideEffect: true,
    // Every 37th step fails, so the summaries have errors to name.
    run: ({ batch }) => { if (batch % 37 === 0) throw new ToolError(`batch ${batch} is locked`); return `copied batch ${batch}: `.padEnd(400 + (batch % 5) * 300, 'r'); },
  })],
});

/** The store, counting the step records each load returns. */
function counting(store: CheckpointStore): { store: CheckpointStore; loads: { options: unknown; records: number }[] } {
  const loads: { options: unknown; records: number }[] = [];
  const wrapped: CheckpointStore = Object.create(store);
  wrapped.load = async (runId, options) => {
    const stored = await store.load(runId, options);
    if (stored) loads.push({ options, records: stored.steps.length });
    return stored;
  };
  return { store: wrapped, loads };
}

/** The prompt of the step after `k`, from every record a full load reads. */
function promptAt(stored: StoredCheckpoint, k: number): string {
  const state = decodeState(stored);
  return promptText(renderStepPrompt({ ...state, steps: state.steps.slice(0, k) }));
}

describe('a cold resume of a long run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('reads at most CONDENSE_AFTER step records, and builds the same prompt a full load builds', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const model = new CopyModel();
    const a = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    const { store, loads } = counting(a.runtime.store);
    const deps = { ...a.deps, store };
    await start(deps, 'copy the batches', 'long');
    const checks = [199, 200, 201, 300, 301, 450, 600];
    for (let n = 1; n <= 600; n++) {
      // Before step n, the run has n - 1 steps. At the checks, this worker forgets what it held.
      if (checks.includes(n - 1)) stepCacheOf(store).delete('long');
      const result = await advance(deps, 'long');
      expect(result.kind).toBe('advanced');
      if (checks.includes(n - 1)) {
        const cold = loads[loads.length - 1]!;
        expect(cold.options).toEqual({ recent: true });
        expect(cold.records).toBeLessThanOrEqual(CONDENSE_AFTER);
        // The prompt the model got from the bounded load is the one every record gives, byte for byte.
        expect(model.prompts.get(n)).toBe(promptAt((await a.runtime.store.load('long'))!, n - 1));
      }
    }
    expect(Math.max(...loads.map((l) => l.records))).toBeLessThanOrEqual(CONDENSE_AFTER);
    // Every original step stays in the store, readable by a full load.
    const full = (await a.runtime.store.load('long'))!;
    expect(decodeState(full).steps.map((s) => s.step)).toEqual(Array.from({ length: 600 }, (_, i) => i + 1));
    expect(await a.runtime.store.history('long')).toHaveLength(601);
    a.runtime.close();
  });

  it('resumes cold at every step with exactly the prompts of a worker that held every record', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const warmModel = new CopyModel();
    const coldModel = new CopyModel();
    const warm = workerProcess({ dbPath: db.path, agent, model: warmModel, clock, workerId: 'W' });
    const cold = workerProcess({ dbPath: db.path, agent, model: coldModel, clock, workerId: 'C' });
    const { store, loads } = counting(cold.runtime.store);
    await start(warm.deps, 'copy the batches', 'warm');
    await start(cold.deps, 'copy the batches', 'cold');
    for (let n = 1; n <= 450; n++) {
      await advance(warm.deps, 'warm');
      stepCacheOf(store).delete('cold');
      await advance({ ...cold.deps, store }, 'cold');
    }
    expect([...coldModel.prompts]).toEqual([...warmModel.prompts]);
    expect(loads.every((l) => l.records <= CONDENSE_AFTER)).toBe(true);
    // The cache breaks once per condensation either way.
    const breaks = (prompts: Map<number, string>) => [...prompts.keys()].filter((n) => n > 1 && condensedBlocks(n - 1) !== condensedBlocks(n - 2));
    expect(breaks(coldModel.prompts)).toEqual([202, 302, 402]);
    // The two runs' records and totals are the same, step for step.
    const runOf = async (runId: string) => decodeState((await warm.runtime.store.load(runId))!);
    const [w, c] = [await runOf('warm'), await runOf('cold')];
    expect(c.usage).toEqual(w.usage);
    expect(c.steps.map((s) => s.result)).toEqual(w.steps.map((s) => s.result));
    warm.runtime.close(); cold.runtime.close();
  });

  it('a long run written before summaries were stored reads every record once, then resumes bounded', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const a = workerProcess({ dbPath: db.path, agent, model: new CopyModel(), clock, workerId: 'A' });
    // 450 steps committed as older code did: records and heads, no summaries.
    let state = initialState({ runId: 'old', agent: agent.name, goal: 'copy the batches', stepCap: 1000, now: 1_000 });
    await a.runtime.store.create(state, META);
    for (let n = 1; n <= 450; n++) {
      const record = recordFor('old', n);
      state = completeStep(state, record, 2_000 + n);
      await a.runtime.store.commit({ runId: 'old', expectedVersion: n, state, appended: record, ...META });
    }
    const { store, loads } = counting(a.runtime.store);
    await advance({ ...a.deps, store }, 'old');
    expect(loads[0]!.records).toBe(450);
    // That step's checkpoint wrote the summaries of the condensed blocks; the next cold resume is bounded.
    const next = counting(a.runtime.store);
    await advance({ ...a.deps, store: next.store }, 'old');
    expect(next.loads[0]).toMatchObject({ options: { recent: true }, records: 151 });
    expect(decodeState((await a.runtime.store.load('old', { recent: true }))!)).toMatchObject({ step: 452, stepsFrom: 300 });
    a.runtime.close();
  });

  it('a run with a dollar budget, which prices every step by its model, resumes cold from its summaries\' costs and stops where a warm one does', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const warm = workerProcess({ dbPath: db.path, agent, model: new CopyModel(), clock, workerId: 'W' });
    const cold = workerProcess({ dbPath: db.path, agent, model: new CopyModel(), clock, workerId: 'C' });
    const { store, loads } = counting(cold.runtime.store);
    // 8e-5 dollars a step (10 input and 2 output tokens of claude-opus-5-5): over the budget after 250 steps.
    const budget = { usd: 0.02 };
    await startRun(warm.deps, { goal: 'copy the batches', runId: 'warm', budget });
    await startRun(cold.deps, { goal: 'copy the batches', runId: 'cold', budget });
    for (let n = 1; n <= 260; n++) {
      await advance(warm.deps, 'warm');
      if (n > 230) stepCacheOf(store).delete('cold');
      await advance({ ...cold.deps, store }, 'cold');
    }
    const runOf = async (runId: string) => decodeState((await warm.runtime.store.load(runId))!);
    const [w, c] = [await runOf('warm'), await runOf('cold')];
    expect(w).toMatchObject({ status: 'over-budget', step: 250 });
    expect(c).toMatchObject({ status: 'over-budget', step: 250, reason: w.reason });
    // Each block's summary says what its records cost, so no resume read every record, and neither worker
    // held more than a bounded load gives.
    expect(loads.filter((l) => l.records > CONDENSE_AFTER)).toEqual([]);
    expect(loads.filter((l) => l.options === undefined)).toEqual([]);
    const summaries = decodeState((await warm.runtime.store.load('warm', { recent: true }))!).condensed!;
    expect(summaries.map((b) => b.cost)).toEqual([{ usd: expect.closeTo(100 * 8e-5, 12), uncachedUsd: expect.closeTo(100 * 8e-5, 12), priced: true, model: 'claude-opus-5-5' }]);
    warm.runtime.close(); cold.runtime.close();
  });

  it('a run with a dollar budget whose blocks were summarised without their cost (older code) reads every record once per worker, then holds no more than a bounded load', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const a = workerProcess({ dbPath: db.path, agent, model: new CopyModel(), clock, workerId: 'A' });
    // 305 steps committed as code before summary format 2 did: the first two blocks' summaries have no cost. Each
    // record costs 8e-5 dollars (10 input and 2 output tokens of claude-opus-5-5): over 0.0252 at step 315.
    let state: RunState = { ...initialState({ runId: 'old', agent: agent.name, goal: 'copy the batches', stepCap: 1000, now: 1_000 }), budget: { usd: 0.0252 } };
    await a.runtime.store.create(state, META);
    const usage = { inputTokens: 10, outputTokens: 2, cacheWriteTokens: 0, cacheReadTokens: 0 };
    for (let n = 1; n <= 305; n++) {
      const record = { ...recordFor('old', n), usage, model: 'claude-opus-5-5' };
      state = completeStep(state, record, 2_000 + n);
      const summaries = summariesDue(state);
      await a.runtime.store.commit({ runId: 'old', expectedVersion: n, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META });
    }
    expect(decodeState((await a.runtime.store.load('old', { recent: true }))!).condensed).toEqual([1, 2].map(() => expect.not.objectContaining({ cost: expect.anything() })));
    const { store, loads } = counting(a.runtime.store);
    const deps = { ...a.deps, store };
    await advance(deps, 'old');
    // The bounded read, then every record, as the budget must price the first blocks step by step.
    expect(loads.map((l) => [l.options, l.records])).toEqual([[{ recent: true }, 105], [undefined, 305]]);
    // Its worker gave the blocks their cost from the records it read, and holds only the records after it.
    expect(stepCacheOf(store).get('old')).toMatchObject({ from: 200, condensed: [{ last: 100, cost: { usd: expect.closeTo(0.008, 12), model: 'claude-opus-5-5' } }, { last: 200, cost: { usd: expect.closeTo(0.008, 12) } }] });
    expect(stepCacheOf(store).get('old')!.steps).toHaveLength(106);
    for (let n = 307; n <= 320; n++) await advance(deps, 'old');
    // No more reads of every record on this worker, and the run stops where the budget says.
    expect(loads.filter((l) => l.options === undefined)).toHaveLength(1);
    expect(decodeState((await a.runtime.store.load('old'))!)).toMatchObject({ status: 'over-budget', step: 315 });
    a.runtime.close();
  });

  it('a fork from a late step sees every step it copies and resumes with the parent\'s prompt', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const model = new CopyModel();
    const a = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
    await start(a.deps, 'copy the batches', 'parent');
    for (let n = 1; n <= 320; n++) await advance(a.deps, 'parent');
    await forkRun(a.deps, 'parent', { fromStep: 310, runId: 'child' });
    const child = decodeState((await a.runtime.store.load('child'))!);
    expect(child.steps).toHaveLength(310);
    const forkModel = new CopyModel();
    const b = workerProcess({ dbPath: db.path, agent, model: forkModel, clock, workerId: 'B' });
    await advance(b.deps, 'child');
    expect(forkModel.prompts.get(311)).toBe(model.prompts.get(311));
    // Its next cold resume is bounded like any run's: the first commit wrote its summaries.
    const { store, loads } = counting(b.runtime.store);
    stepCacheOf(store).delete('child');
    await advance({ ...b.deps, store }, 'child');
    expect(loads[0]!.records).toBeLessThanOrEqual(CONDENSE_AFTER);
    expect(forkModel.prompts.get(312)).toBe(promptAt((await a.runtime.store.load('child'))!, 311));
    // The parent is read, never changed: every step of it is still there.
    expect(decodeState((await a.runtime.store.load('parent'))!).steps).toHaveLength(320);
    a.runtime.close(); b.runtime.close();
  });
});
