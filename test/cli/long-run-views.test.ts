import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { historyCommand, statusCommand } from '../../lib/cli/commands/read.ts';
import { showCommand } from '../../lib/cli/commands/show.ts';
import { runCost } from '../../lib/llm/cost.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { stepwiseSync } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { countRecordsRead, writeLongRun } from '../support/long-run.ts';

// `status`, `history` and `show` of a run of 1,250 steps, in this process so that the store's reads can be
// counted (each command opens its own store, as from the command line).
const STEPS = 1_250;
const db = tempDb();
let counted: ReturnType<typeof countRecordsRead> | undefined;

beforeAll(async () => {
  const runtime = openLocalRuntime({ dbPath: db.path });
  await writeLongRun(runtime.store, 'long', STEPS);
  await writeLongRun(runtime.store, 'short', 12);
  runtime.close();
}, 60_000);
afterAll(() => db.cleanup());
afterEach(() => { counted?.restore(); counted = undefined; });

async function run(command: typeof statusCommand, runId: string, options: Record<string, unknown> = {}): Promise<string> {
  const lines: string[] = [];
  expect(await command(runId, { db: db.path, ...options }, (line) => lines.push(line))).toBe(0);
  return lines.join('\n');
}

const STEP_ROW = (n: number) => new RegExp(`^${n} +write_row`, 'm');
const STEP_HEAD = (n: number) => new RegExp(`^step ${n} {2}write_row`, 'm');

describe('status, history and show of a long run print its last 50 steps, reading those', () => {
  it('status: the last 50 steps, a line naming the rest and the flags that show them, the whole run\'s cost', async () => {
    counted = countRecordsRead();
    const text = await run(statusCommand, 'long');
    expect(counted.records()).toBeLessThanOrEqual(200);
    expect(text).toContain(`(steps 1-${STEPS - 50} not shown: --last <n> shows the last n, --all every one)`);
    expect(text).toMatch(STEP_ROW(STEPS - 49));
    expect(text).toMatch(STEP_ROW(STEPS));
    expect(text).not.toMatch(STEP_ROW(STEPS - 50));
    expect(text).toContain(`step     ${STEPS} of at most ${STEPS + 100}`);
    const runtime = openLocalRuntime({ dbPath: db.path, readOnly: true });
    const cost = runCost(decodeState((await runtime.store.load('long'))!), '');
    runtime.close();
    expect(text).toContain(`estimated $${cost.usd.toFixed(2)}`);

    expect(await run(statusCommand, 'long', { last: 3 })).toContain(`(steps 1-${STEPS - 3} not shown`);
    const all = await run(statusCommand, 'long', { all: true });
    expect(all).not.toContain('not shown');
    expect(all).toMatch(STEP_ROW(1));
  });

  it('status --json gives every step, as scripts read it; with --last the last n and where they start', async () => {
    const every = JSON.parse(await run(statusCommand, 'long', { json: true }));
    expect(every.steps).toHaveLength(STEPS);
    expect(every).not.toHaveProperty('stepsFrom');
    expect(every).not.toHaveProperty('condensed');
    counted = countRecordsRead();
    const last = JSON.parse(await run(statusCommand, 'long', { json: true, last: 5 }));
    expect(counted.records()).toBeLessThanOrEqual(200);
    expect(last.steps.map((s: { step: number }) => s.step)).toEqual([1246, 1247, 1248, 1249, 1250]);
    expect(last).toMatchObject({ stepsFrom: STEPS - 5, step: STEPS, usage: every.usage });
    expect(last.cost.usd).toBeCloseTo(every.cost.usd, 12);
  });

  it('history: the last 50 checkpoints, with the records of their steps alone', async () => {
    counted = countRecordsRead();
    const text = await run(historyCommand, 'long');
    expect(counted.records()).toBeLessThanOrEqual(200);
    expect(text.split('\n')[0]).toBe(`(checkpoints before version ${STEPS + 1 - 49} not shown: --last <n> shows the last n, --all every one)`);
    expect(text.split('\n').filter((line) => /^\d+ +\d+ +running/.test(line))).toHaveLength(50);
    // Each step shown has its tokens: its record was read.
    expect(text).toMatch(new RegExp(`^${STEPS + 1} +${STEPS} +running +write_row .* ${1000 + STEPS + 10} `, 'm'));
    const every = JSON.parse(await run(historyCommand, 'long', { json: true }));
    expect(every).toHaveLength(STEPS + 1);
    expect(JSON.parse(await run(historyCommand, 'long', { json: true, last: 2 })).map((h: { version: number }) => h.version)).toEqual([STEPS, STEPS + 1]);
  });

  it('show: the last 50 steps; show --step of an early step reads that step and those before it', async () => {
    counted = countRecordsRead();
    const text = await run(showCommand, 'long');
    expect(counted.records()).toBeLessThanOrEqual(200);
    expect(text).toContain(`(steps 1-${STEPS - 50} not shown`);
    expect(text).toMatch(STEP_HEAD(STEPS - 49));
    expect(text).not.toMatch(STEP_HEAD(STEPS - 50));
    counted.restore();

    counted = countRecordsRead();
    const early = await run(showCommand, 'long', { step: 7 });
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 7 }]);
    expect(early).toContain(`state after step 7 of ${STEPS}`);
    expect(early).not.toContain('not shown');
    expect(early).toMatch(STEP_HEAD(1));
    expect(early).toMatch(STEP_HEAD(7));
    expect(early).not.toMatch(STEP_HEAD(8));
    const view = JSON.parse(await run(showCommand, 'long', { step: 900, json: true, last: 1 }));
    expect(view).toMatchObject({ atStep: 900, stepsFrom: 899, steps: [{ step: 900 }] });
  });

  it('a run of no more than 50 steps prints as it did: every step, no line about others', async () => {
    const status = await run(statusCommand, 'short');
    expect(status).not.toContain('not shown');
    expect(status).toMatch(STEP_ROW(1));
    expect(await run(historyCommand, 'short')).not.toContain('not shown');
    const show = await run(showCommand, 'short');
    expect(show).not.toContain('not shown');
    expect(show).toMatch(STEP_HEAD(1));
  });

  it('refuses --last with --all, and --last without a run', () => {
    const both = stepwiseSync(['status', 'long', '--last', '5', '--all'], { STEPWISE_DB: db.path });
    expect(both.code).toBe(2);
    expect(both.err).toContain('--last and --all both say how many steps to show: give one');
    const none = stepwiseSync(['status', '--last', '5'], { STEPWISE_DB: db.path });
    expect(none.code).toBe(2);
    expect(none.err).toContain('--last and --all choose the steps of one run');
    const zero = stepwiseSync(['show', 'long', '--last', '0'], { STEPWISE_DB: db.path });
    expect(zero.code).toBe(2);
    expect(zero.err).toContain('--last must be a whole number (1 or more), got "0"');
    const last = stepwiseSync(['show', 'long', '--last', '2'], { STEPWISE_DB: db.path });
    expect(last.code).toBe(0);
    expect(last.out).toContain(`(steps 1-${STEPS - 2} not shown`);
  });
});
