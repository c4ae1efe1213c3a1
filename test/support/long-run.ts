import { vi } from 'vitest';
import { summariesDue } from '../../lib/core/condensed.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import type { RunState } from '../../lib/core/state.ts';
import { blockCost } from '../../lib/llm/cost.ts';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import type { CheckpointStore } from '../../lib/ports.ts';
import { META, newState, recordFor } from './states.ts';

/**
 * A completed-so-far run of `steps` steps written straight to the store, as its workers' checkpoints would
 * write it: each step's record with usage and a model (alternating, so a cost priced by one model alone is
 * wrong), and the summaries each checkpoint condenses (`priced`: with their cost, as this release writes them;
 * else as an older release's, without; 'not-then': by a release whose price table had neither model, each
 * block's cost saying so). About a second for 1,000 steps in SQLite.
 */
export async function writeLongRun(
  store: CheckpointStore, runId: string, steps: number, options: { priced?: boolean | 'not-then'; agent?: string } = {},
): Promise<RunState> {
  const notThen = () => ({ usd: 0, uncachedUsd: 0, unpriced: ['claude-sonnet-4-5', 'claude-opus-4-1'], model: 'claude-opus-4-1' });
  let state: RunState = { ...newState(runId), stepCap: steps + 100, ...(options.agent ? { agent: options.agent } : {}) };
  await store.create(state, META);
  for (let n = 1; n <= steps; n++) {
    const record = {
      ...recordFor(runId, n), usage: { inputTokens: 1000 + n, outputTokens: 10, cacheWriteTokens: 0, cacheReadTokens: 0 },
      model: n % 2 ? 'claude-sonnet-4-5' : 'claude-opus-4-1',
    };
    state = completeStep(state, record, 5_000 + n);
    const summaries = summariesDue(state, options.priced === false ? undefined : options.priced === 'not-then' ? notThen : blockCost);
    await store.commit({ runId, expectedVersion: n, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META });
  }
  return state;
}

/**
 * Counts the step records every SQLite checkpoint store in this process reads, by load() and records(),
 * whoever opened it (a CLI command opens its own): a bounded reader reads a few hundred of a long run's.
 */
export function countRecordsRead(): { records(): number; reads(): { method: string; records: number }[]; restore(): void } {
  const reads: { method: string; records: number }[] = [];
  const load = SqliteCheckpointStore.prototype.load;
  const records = SqliteCheckpointStore.prototype.records;
  const loadSpy = vi.spyOn(SqliteCheckpointStore.prototype, 'load').mockImplementation(async function (this: SqliteCheckpointStore, ...args) {
    const stored = await load.apply(this, args);
    reads.push({ method: 'load', records: stored?.steps.length ?? 0 });
    return stored;
  });
  const recordsSpy = vi.spyOn(SqliteCheckpointStore.prototype, 'records').mockImplementation(async function (this: SqliteCheckpointStore, ...args) {
    const read = await records.apply(this, args);
    reads.push({ method: 'records', records: read.length });
    return read;
  });
  return {
    records: () => reads.reduce((n, r) => n + r.records, 0),
    reads: () => reads.slice(),
    restore: () => { loadSpy.mockRestore(); recordsSpy.mockRestore(); },
  };
}
