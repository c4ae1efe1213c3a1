import { afterEach, describe, expect, it } from 'vitest';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { ManualClock, tempDb } from '../support/harness.ts';

describe('the local queue\'s receive limit', () => {
  let db: ReturnType<typeof tempDb>;
  let runtime: LocalRuntime | undefined;
  afterEach(() => { runtime?.close(); db?.cleanup(); });

  it('takes at most `max` visible messages, oldest first, and refuses a limit that is not a whole number of at least 1', async () => {
    db = tempDb();
    const clock = new ManualClock();
    runtime = openLocalRuntime({ dbPath: db.path, clock });
    for (let v = 1; v <= 5; v++) {
      await runtime.queue.send({ runId: `r${v}`, version: 1 });
      clock.advance(1);
    }
    const bodies = (ds: { body: string }[]) => ds.map((d) => (JSON.parse(d.body) as { runId: string }).runId);
    expect(bodies(await runtime.queue.receive({ max: 3, visibilityMs: 60_000 }))).toEqual(['r1', 'r2', 'r3']);
    expect(bodies(await runtime.queue.receive({ max: 1, visibilityMs: 60_000 }))).toEqual(['r4']);
    for (const max of [0, -1, 1.5, Number.NaN]) {
      await expect(runtime.queue.receive({ max, visibilityMs: 60_000 })).rejects.toThrow(/max must be a whole number/);
    }
    // Nothing was taken by the refused receives: r5 is still there.
    expect(bodies(await runtime.queue.receive({ max: 10, visibilityMs: 60_000 }))).toEqual(['r5']);
  });
});
