import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { checkpointStoreContract } from '../contract/checkpoint-store-contract.ts';
import { eventBufferContract } from '../contract/event-buffer-contract.ts';
import { SqliteEventBuffer } from '../../lib/local/sqlite-event-buffer.ts';
import { SqliteLedger } from '../../lib/local/sqlite-ledger.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';
import { decodeState, encodeSummary } from '../../lib/core/codec.ts';
import { condensedBlock } from '../../lib/core/condensed.ts';
import { UnreadableCheckpointError } from '../../lib/core/errors.ts';

const dir = mkdtempSync(join(tmpdir(), 'stepwise-store-'));
let now = 1_000_000;
const clock = { now: () => now };
const runtime = openLocalRuntime({ dbPath: join(dir, 'store.db'), clock, retentionMs: 60_000 });
afterAll(() => { runtime.close(); rmSync(dir, { recursive: true, force: true }); });

const clocked: ReturnType<typeof openLocalRuntime>[] = [];
afterAll(() => { for (const r of clocked) r.close(); });
checkpointStoreContract('SQLite', () => ({
  store: runtime.store,
  ledger: runtime.ledger,
  ledgerBehind: (ms) => new SqliteLedger(runtime.db, { now: () => now - ms }),
  storeAt: (at) => {
    const other = openLocalRuntime({ dbPath: join(dir, 'store.db'), clock: at, retentionMs: 60_000 });
    clocked.push(other);
    return other.store;
  },
  corruptLatestHead: async (runId) => {
    runtime.db.prepare('UPDATE checkpoints SET head = ? WHERE run_id = ? AND version = (SELECT max(version) FROM checkpoints WHERE run_id = ?)').run('{not json', runId, runId);
  },
}));

const events = new SqliteEventBuffer(runtime.db, { clock });
eventBufferContract('SQLite', () => ({ events, setNow: (ms) => { now = ms; } }));

describe('SQLite bounded load', () => {
  it('leaves out the summary of a block not condensed at the head\'s step; a gap is refused as unreadable', async () => {
    const runId = 'bounded-race';
    await runtime.store.create(newState(runId), META);
    for (let n = 1; n <= 320; n++) await runtime.store.commit({ runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
    const state = stateAfter(runId, 320);
    const put = (last: number) => runtime.db.prepare('INSERT INTO summaries (run_id, last_step, summary) VALUES (?, ?, ?)')
      .run(runId, last, encodeSummary(condensedBlock(state.steps.slice(last - 100, last))));
    put(100);
    put(300);
    // Block 201-300 is condensed only from step 401 on: left out. Block 101-200 is missing: a gap.
    const loaded = (await runtime.store.load(runId, { recent: true }))!;
    expect(loaded).toMatchObject({ stepsAfter: 100, summaries: [expect.stringContaining('"last":100')] });
    expect(decodeState(loaded).steps).toEqual(state.steps.slice(100));
    put(200);
    expect(decodeState((await runtime.store.load(runId, { recent: true }))!)).toMatchObject({ stepsFrom: 200, steps: state.steps.slice(200) });
    runtime.db.prepare('DELETE FROM summaries WHERE run_id = ? AND last_step = 100').run(runId);
    const gap = (await runtime.store.load(runId, { recent: true }))!;
    expect(() => decodeState(gap)).toThrow(UnreadableCheckpointError);
  });
});

describe('SQLite load of a run whose records the caller holds', () => {
  it('reads no record past the run\'s step for a caller holding them all, and a stray one past it is read and refused by a full load', async () => {
    const runId = 'stray-record';
    await runtime.store.create(newState(runId), META);
    for (let n = 1; n <= 3; n++) await runtime.store.commit({ runId, expectedVersion: n, state: stateAfter(runId, n), appended: recordFor(runId, n), ...META });
    const held = await runtime.store.load(runId, { afterStep: 3 });
    expect(held?.steps).toEqual([]);
    expect(held?.pending).toBeUndefined();
    // A record the fence never lets a commit write: step 5 with the head at step 3.
    runtime.db.prepare(`INSERT INTO steps (id, run_no, run_id, step, record) SELECT run_no * ${2 ** 32} + 5, run_no, run_id, 5, ? FROM runs WHERE run_id = ?`).run(JSON.stringify(recordFor(runId, 5)), runId);
    const full = (await runtime.store.load(runId))!;
    expect(full.steps).toHaveLength(4);
    expect(() => decodeState(full)).toThrow(UnreadableCheckpointError);
    // A worker holding steps 1-3 still reads what follows step 2.
    expect((await runtime.store.load(runId, { afterStep: 2 }))?.steps).toHaveLength(2);
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

describe('SQLite deleteRun', () => {
  it('deletes every idempotency record under the run\'s prefix, its approval emails\' too, and no other run\'s', async () => {
    const runId = 'delete-prefix';
    await runtime.store.create(newState(runId), META);
    const state = decodeState((await runtime.store.load(runId))!);
    await runtime.store.commit({ runId, expectedVersion: 1, state: { ...state, status: 'cancelled', reason: 'by hand' }, ...META });
    const keys = [`${runId}/step-1`, `${runId}/wait-w1/ops@example.com`, `${runId}0/step-1`, `${runId}.x/step-1`, `${runId}`];
    for (const key of keys) await runtime.ledger.once(key, {}, () => 'first');
    expect(await runtime.store.deleteRun(runId, 2)).toBe(true);
    const left = runtime.db.prepare('SELECT key FROM ledger WHERE key IN (SELECT value FROM json_each(?)) ORDER BY key').all(JSON.stringify(keys)) as { key: string }[];
    expect(left.map((r) => r.key)).toEqual([`${runId}`, `${runId}.x/step-1`, `${runId}0/step-1`]);
  });
});
