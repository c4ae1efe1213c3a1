import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { checkpointStoreContract } from '../contract/checkpoint-store-contract.ts';
import { eventBufferContract } from '../contract/event-buffer-contract.ts';
import { SqliteEventBuffer } from '../../lib/local/sqlite-event-buffer.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';
import { decodeState, encodeSummary } from '../../lib/core/codec.ts';
import { condensedBlock } from '../../lib/core/condensed.ts';

const dir = mkdtempSync(join(tmpdir(), 'stepwise-store-'));
let now = 1_000_000;
const clock = { now: () => now };
const runtime = openLocalRuntime({ dbPath: join(dir, 'store.db'), clock, retentionMs: 60_000 });
afterAll(() => { runtime.close(); rmSync(dir, { recursive: true, force: true }); });

checkpointStoreContract('SQLite', () => ({
  store: runtime.store,
  corruptLatestHead: async (runId) => {
    runtime.db.prepare('UPDATE checkpoints SET head = ? WHERE run_id = ? AND version = (SELECT version FROM runs WHERE run_id = ?)').run('{not json', runId, runId);
  },
}));

const events = new SqliteEventBuffer(runtime.db, { clock });
eventBufferContract('SQLite', () => ({ events, setNow: (ms) => { now = ms; } }));

describe('SQLite bounded load', () => {
  it('leaves out a summary a later checkpoint wrote and any after a gap', async () => {
    const runId = 'bounded-race';
    await runtime.store.create(newState(runId), META);
    for (let n = 1; n <= 320; n++) await runtime.store.commit({ runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
    const state = stateAfter(runId, 320);
    const put = (first: number, last: number, at: number) => runtime.db.prepare('INSERT INTO summaries (run_id, first_step, last_step, at_step, summary) VALUES (?, ?, ?, ?, ?)')
      .run(runId, first, last, at, encodeSummary(condensedBlock(state.steps.slice(first - 1, last))));
    put(1, 100, 201);
    put(101, 200, 321);
    put(201, 300, 301);
    const loaded = (await runtime.store.load(runId, { recent: true }))!;
    expect(loaded.summaries).toHaveLength(1);
    expect(loaded.stepsAfter).toBe(100);
    expect(decodeState(loaded).steps).toEqual(state.steps.slice(100));
  });
});

describe('SQLite retention', () => {
  it('prunes checkpoints older than the window but never the latest', async () => {
    const runId = 'retention-run';
    await runtime.store.create(newState(runId), META);
    for (let n = 1; n <= 3; n++) {
      now += 1000;
      await runtime.store.commit({ runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
    }
    expect(runtime.store.prune()).toBe(0);
    now += 60_001 - 2000; // versions 1 and 2 are past the window; 3 is not; 4 is the latest
    const removed = runtime.store.prune();
    expect(removed).toBeGreaterThanOrEqual(2);
    const history = await runtime.store.history(runId);
    expect(history.map((h) => h.version)).toEqual([3, 4]);
    now += 10 * 60_000;
    runtime.store.prune();
    expect((await runtime.store.history(runId)).map((h) => h.version)).toEqual([4]);
    // The latest checkpoint still resumes the run with every step.
    const loaded = await runtime.store.load(runId);
    expect(loaded?.steps).toHaveLength(3);
  });
});
