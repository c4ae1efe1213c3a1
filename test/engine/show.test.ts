import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { DamagedBlobError } from '../../lib/core/errors.ts';
import { showRun, withOutput } from '../../lib/engine/operate/show.ts';
import type { BlobStore } from '../../lib/ports.ts';
import { ManualClock, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

/** Each step's output is over the inline limit: the checkpoint keeps an excerpt, the blob store the rest. */
const output = (step: number) => `${'log line\n'.repeat(600)}end of step ${step}`;
const agent = defineAgent({
  name: 'long-logs',
  tools: [tool({ name: 'read_log', description: 'Read a log.', input: z.object({ step: z.number() }), sideEffect: false, run: ({ step }) => output(step) })],
});
const STEPS = 20;

describe('show with whole outputs', () => {
  let db: ReturnType<typeof tempDb> | undefined;
  afterEach(() => db?.cleanup());

  async function longRun() {
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel((step) => step <= STEPS ? { kind: 'tool', tool: 'read_log', input: { step } } : { kind: 'done', summary: 'read' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    await start(deps);
    await drain(deps, runtime, clock);
    return runtime;
  }

  it('reads a long run\'s blobs a few at a time, not all at once, and shows every one whole', async () => {
    const runtime = await longRun();
    let reading = 0;
    let most = 0;
    // The blob store the file has, counting the reads in flight at once.
    const counted: BlobStore = {
      put: (ref, data) => runtime.blobs.put(ref, data),
      get: async (ref) => {
        most = Math.max(most, ++reading);
        await new Promise((r) => setTimeout(r, 5));
        try {
          return await runtime.blobs.get(ref);
        } finally {
          reading--;
        }
      },
    };
    const view = await showRun({ store: runtime.store, blobs: counted }, 'run', { full: true });
    expect(view.steps.map((s) => s.output)).toEqual(Array.from({ length: STEPS }, (_, i) => output(i + 1)));
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(8);
    runtime.close();
  });

  it('withOutput gives one step its whole output, or says the blob store no longer has it or gives it back damaged', async () => {
    const runtime = await longRun();
    const view = await showRun(runtime, 'run');
    expect(view.steps.every((s) => s.output === undefined && s.result.ref)).toBe(true);
    expect((await withOutput(runtime.blobs, view.steps[2]!)).output).toBe(output(3));
    const gone: BlobStore = { put: async () => undefined, get: async () => undefined };
    expect(await withOutput(gone, view.steps[2]!)).toMatchObject({ step: 3, outputMissing: true });
    expect(await withOutput(gone, { ...view.steps[2]!, result: { ok: true, bytes: 2, text: 'ok' } })).not.toHaveProperty('outputMissing');
    // Damaged is lost as gone is: said with what is wrong, where it threw; any other failure still throws.
    const damaged: BlobStore = { put: async () => undefined, get: async (ref) => { throw new DamagedBlobError(ref, 'cut short'); } };
    expect(await withOutput(damaged, view.steps[2]!)).toMatchObject({ step: 3, outputDamaged: 'cut short' });
    const down: BlobStore = { put: async () => undefined, get: async () => { throw new Error('connection reset'); } };
    await expect(withOutput(down, view.steps[2]!)).rejects.toThrow('connection reset');
    runtime.close();
  });
});
