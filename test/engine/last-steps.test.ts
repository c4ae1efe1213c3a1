import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { stateAtStep } from '../../lib/core/operate.ts';
import { runCost } from '../../lib/llm/cost.ts';
import { readLastSteps } from '../../lib/engine/operate/last-steps.ts';
import { showRun } from '../../lib/engine/operate/show.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { copyFileSync } from 'node:fs';
import { fixturePath } from '../fixtures/formats/resume.ts';
import { tempDb } from '../support/harness.ts';
import { countRecordsRead, writeLongRun } from '../support/long-run.ts';

const STEPS = 1_250;
const db = tempDb();
let runtime: LocalRuntime;
let counted: ReturnType<typeof countRecordsRead> | undefined;

beforeAll(async () => {
  runtime = openLocalRuntime({ dbPath: db.path });
  await writeLongRun(runtime.store, 'long', STEPS);
  await writeLongRun(runtime.store, 'long-older', 450, { priced: false });
  await writeLongRun(runtime.store, 'long-not-then', 450, { priced: 'not-then' });
}, 60_000);
afterAll(() => { runtime.close(); db.cleanup(); });
afterEach(() => { counted?.restore(); counted = undefined; });

/** The run read whole, as show read it before: what every bounded view must agree with. */
async function whole(runId: string) {
  return decodeState((await runtime.store.load(runId))!);
}

describe('a view of a long run reads the steps it shows, not every record', () => {
  it('show --step of an early step reads that step and those before it, its usage and cost every step\'s through it', async () => {
    const all = await whole('long');
    counted = countRecordsRead();
    const view = await showRun(runtime, 'long', { step: 40, last: 50 });
    // The bounded read of a resume (the records after the last summary), then steps 1-40.
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 40 }]);
    const at = stateAtStep(all, 40);
    expect(view.steps).toEqual(at.steps);
    expect(view).toMatchObject({ atStep: 40, step: STEPS, usage: at.usage });
    expect(view.stepsFrom).toBeUndefined();
    expect(view.cost.usd).toBeCloseTo(runCost(at, '').usd, 12);
  });

  it('a step in the middle: its record and the block before it, priced by the summaries of the blocks before that', async () => {
    const all = await whole('long');
    counted = countRecordsRead();
    const view = await showRun(runtime, 'long', { step: 733, last: 1 });
    // Steps 701-733: the summaries of blocks 1-7 count steps 1-700.
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 33 }]);
    const at = stateAtStep(all, 733);
    expect(view.steps).toEqual([all.steps[732]]);
    expect(view).toMatchObject({ atStep: 733, stepsFrom: 732, usage: at.usage });
    expect(view.cost.usd).toBeCloseTo(runCost(at, '').usd, 12);
  });

  it('the last steps of the run now: the bounded read alone, the cost of the whole run', async () => {
    const all = await whole('long');
    counted = countRecordsRead();
    const view = await showRun(runtime, 'long', { last: 50 });
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }]);
    expect(view.steps.map((s) => s.step)).toEqual(Array.from({ length: 50 }, (_, i) => STEPS - 49 + i));
    expect(view).toMatchObject({ atStep: STEPS, stepsFrom: STEPS - 50, usage: all.usage });
    expect(view.cost.usd).toBeCloseTo(runCost(all, '').usd, 12);
  });

  it('without `last`, every step, as before', async () => {
    const all = await whole('long');
    const view = await showRun(runtime, 'long', { step: 1_000 });
    expect(view.steps).toEqual(all.steps.slice(0, 1_000));
    expect(view.stepsFrom).toBeUndefined();
    expect(view.usage).toEqual(stateAtStep(all, 1_000).usage);
  });

  it('summaries of an older release, without their cost, count from their records: the cost stays each step\'s own', async () => {
    const all = await whole('long-older');
    counted = countRecordsRead();
    const read = await readLastSteps(runtime.store, 'long-older', 'show', { last: 10 });
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 300 }]);
    expect(read.steps.map((s) => s.step)).toEqual(Array.from({ length: 10 }, (_, i) => 441 + i));
    expect(runCost(read.at, '')).toEqual(runCost(all, ''));
  });

  it('summaries whose cost found no price for models this code prices count from their records too, not as unpriced', async () => {
    const all = await whole('long-not-then');
    counted = countRecordsRead();
    const read = await readLastSteps(runtime.store, 'long-not-then', 'show', { last: 10 });
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 300 }]);
    expect(runCost(read.at, '')).toEqual(runCost(all, ''));
    expect(runCost(read.at, '')).toMatchObject({ priced: true, unpriced: [] });
  });

  it('a run an earlier release wrote (the fixture condensed-1, 202 steps): its early steps read alone agree with the whole read', async () => {
    const fixture = tempDb();
    copyFileSync(fixturePath('3-wait2-summary2-layout2', 'sqlite.db'), fixture.path);
    const old = openLocalRuntime({ dbPath: fixture.path });
    try {
      const all = decodeState((await old.store.load('condensed-1'))!);
      expect(all.step).toBe(202);
      counted = countRecordsRead();
      const view = await showRun(old, 'condensed-1', { step: 60, last: 5 });
      expect(counted.reads()).toEqual([{ method: 'load', records: 102 }, { method: 'records', records: 60 }]);
      const at = stateAtStep(all, 60);
      expect(view.steps).toEqual(at.steps.slice(55));
      expect(view).toMatchObject({ stepsFrom: 55, usage: at.usage });
      expect(view.cost).toEqual((await showRun(old, 'condensed-1', { step: 60 })).cost);
    } finally {
      old.close();
      fixture.cleanup();
    }
  });

  it('refuses a step past the run, as a whole read did', async () => {
    await expect(showRun(runtime, 'long', { step: STEPS + 1, last: 5 })).rejects.toThrow(`run long has ${STEPS} completed steps; there is no step ${STEPS + 1}`);
  });
});
