import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { historyCommand, statusCommand } from '../../lib/cli/commands/read.ts';
import { showCommand } from '../../lib/cli/commands/show.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import type { RunState } from '../../lib/core/state.ts';
import { showRun } from '../../lib/engine/operate/show.ts';
import { formatUsd } from '../../lib/llm/cost.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';
import { META, newState, recordFor } from '../support/states.ts';

// A run whose first steps an older release recorded without their model, the last with Opus: the API
// (GET /runs/:id, show --json) and the budget price the usage no record names a model for by the run's last
// model; status, history and show as text priced it by this machine's default model (Sonnet), a third of it.
const db = tempDb();
let apiUsd = 0;

beforeAll(async () => {
  const runtime = openLocalRuntime({ dbPath: db.path });
  let state: RunState = newState('mixed');
  await runtime.store.create(state, META);
  for (let n = 1; n <= 3; n++) {
    const record = { ...recordFor('mixed', n), usage: { inputTokens: 100_000, outputTokens: 1_000, cacheWriteTokens: 0, cacheReadTokens: 0 }, ...(n === 3 ? { model: 'claude-opus-4-1' } : {}) };
    state = completeStep(state, record, 5_000 + n);
    await runtime.store.commit({ runId: 'mixed', expectedVersion: n, state, appended: record, ...META });
  }
  apiUsd = (await showRun(runtime, 'mixed')).cost.usd;
  runtime.close();
});
afterAll(() => db.cleanup());

async function text(command: typeof statusCommand, options: Record<string, unknown> = {}): Promise<string> {
  const lines: string[] = [];
  expect(await command('mixed', { db: db.path, ...options }, (line) => lines.push(line))).toBe(0);
  return lines.join('\n');
}

describe('usage no record names a model for', () => {
  it('is priced by the run\'s last model in status, history and show, text and JSON, as the API prices it', async () => {
    process.env.STEPWISE_MODEL = 'claude-sonnet-4-5';
    try {
      // Three steps at Opus's price: $1.5 + $0.075 each.
      expect(apiUsd).toBeCloseTo(3 * (100_000 * 15 + 1_000 * 75) / 1e6, 9);
      expect((JSON.parse(await text(statusCommand, { json: true })) as { cost: { usd: number } }).cost.usd).toBe(apiUsd);
      for (const command of [statusCommand, historyCommand, showCommand]) expect(await text(command)).toContain(`estimated ${formatUsd(apiUsd)}`);
      const history = JSON.parse(await text(historyCommand, { json: true })) as { step: number; model?: string }[];
      expect(history.filter((h) => h.model).map((h) => h.model)).toEqual(['claude-opus-4-1', 'claude-opus-4-1', 'claude-opus-4-1']);
    } finally {
      delete process.env.STEPWISE_MODEL;
    }
  });
});
