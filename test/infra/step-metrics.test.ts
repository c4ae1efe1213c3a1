import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import type { LocalRuntime } from '../../lib/local/runtime.ts';
import { answerApproval } from '../../lib/waits/answer.ts';
import { requestApproval } from '../../lib/waits/tools.ts';
import { stepMetrics, type MetricPoint } from '../../lib/aws/step-metrics.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { runCost } from '../../lib/llm/cost.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { METRIC_NAMES } from '../../lib/settings.ts';
import { condensedBlock } from '../../lib/core/condensed.ts';
import { complete, completeStep } from '../../lib/core/transitions.ts';
import { newState, recordFor } from '../support/states.ts';
import { ManualClock, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

/** The worker's metrics, computed from what the engine hands back for each message of a real run. */

const usage = (input: number, output: number, cacheRead = 0) => ({ inputTokens: input, outputTokens: output, cacheWriteTokens: 0, cacheReadTokens: cacheRead });
const agent = defineAgent({
  name: 'metrics-agent',
  tools: [tool({ name: 'note', description: 'Notes a value.', input: z.object({ n: z.number() }), sideEffect: false, run: ({ n }) => `noted ${n}` })],
});
const MODEL = 'claude-opus-5-5';

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

async function runAndCollect(script: (step: number, attempt: number) => ModelReply): Promise<{ points: MetricPoint[]; state: Awaited<ReturnType<typeof loadState>> }> {
  const { deps, runtime, clock } = worker(script);
  await start(deps);
  const points = await collect(deps, runtime, clock);
  const state = await loadState(runtime);
  runtime.close();
  return { points, state };
}

function worker(script: (step: number, attempt: number) => ModelReply, of: AgentDefinition = agent) {
  const db = tempDb();
  cleanup = db.cleanup;
  const clock = new ManualClock();
  const attempts = new Map<number, number>();
  const model = new StubModel((step) => {
    attempts.set(step, (attempts.get(step) ?? 0) + 1);
    return script(step, attempts.get(step)!);
  });
  return { ...workerProcess({ dbPath: db.path, agent: of, model, clock, workerId: 'w' }), clock };
}

/** Works the queue as the worker Lambda does, and keeps the metrics of every delivery. */
async function collect(deps: EngineDeps, runtime: LocalRuntime, clock: ManualClock): Promise<MetricPoint[]> {
  const points: MetricPoint[] = [];
  for (let i = 0; i < 20; i++) {
    const [delivery] = await runtime.queue.receive({ visibilityMs: 30_000 });
    if (!delivery) {
      if (runtime.queue.depth() === 0) break;
      clock.advance(60_000);
      continue;
    }
    const handled = await handleDelivery(deps, delivery);
    points.push(...stepMetrics(handled, MODEL));
    if (handled.action === 'ack') await runtime.queue.ack(delivery);
    else await runtime.queue.release(delivery, handled.delayMs);
  }
  return points;
}

const total = (points: MetricPoint[], name: string) => points.filter((p) => p.name === name).reduce((n, p) => n + p.value, 0);

describe('worker metrics from handled messages', () => {
  it('publish at a run\'s end what its checkpoint added, the same from a bounded state (condensed blocks not held) as from every record', () => {
    let state = newState('long');
    for (let n = 1; n <= 250; n++) state = completeStep(state, { ...recordFor('long', n), usage: usage(n, 2), model: MODEL }, 3_000 + n);
    const done = complete(state, 'all noted', usage(40, 30, 200), 9_000);
    const bounded = { ...done, stepsFrom: 100, steps: done.steps.slice(100), condensed: [condensedBlock(done.steps.slice(0, 100))] };
    const at = (s: typeof done): MetricPoint[] => stepMetrics({ action: 'ack', outcome: { kind: 'advanced', version: 252, state: s, bytes: 1_000, added: usage(40, 30, 200) } }, MODEL);
    expect(at(bounded)).toEqual(at(done));
    expect(total(at(bounded), METRIC_NAMES.inputTokens)).toBe(40);
    expect(total(at(bounded), METRIC_NAMES.modelCostUsd)).toBeGreaterThan(0);
  });

  it('count steps, failed attempts and run ends, and add the tokens up to exactly the run usage, discarded replies included', async () => {
    const { points, state } = await runAndCollect((step, attempt) => {
      if (step === 2 && attempt === 1) return { kind: 'invalid', reason: 'two tool calls', usage: usage(70, 9), model: MODEL };
      if (step <= 2) return { kind: 'tool', tool: 'note', input: { n: step }, usage: usage(100 * step, 10, 50), model: MODEL };
      return { kind: 'done', summary: 'noted twice', usage: usage(40, 30, 200), model: MODEL };
    });
    expect(state).toMatchObject({ status: 'completed', step: 2 });
    expect(total(points, METRIC_NAMES.steps)).toBe(2);
    expect(total(points, METRIC_NAMES.failedAttempts)).toBe(1);
    expect(total(points, METRIC_NAMES.runsCompleted)).toBe(1);
    expect(total(points, METRIC_NAMES.runsFailed)).toBe(0);
    expect(total(points, METRIC_NAMES.inputTokens)).toBe(state.usage.inputTokens);
    expect(total(points, METRIC_NAMES.outputTokens)).toBe(state.usage.outputTokens);
    expect(total(points, METRIC_NAMES.cacheReadTokens)).toBe(state.usage.cacheReadTokens);
    // 100 + 200 (steps) + 70 (discarded) + 40 (DONE)
    expect(state.usage.inputTokens).toBe(410);
    expect(total(points, METRIC_NAMES.modelCostUsd)).toBeCloseTo(runCost(state, MODEL).usd, 12);
    // One checkpoint size per commit: two steps, the failed attempt, the end.
    expect(points.filter((p) => p.name === METRIC_NAMES.checkpointBytes)).toHaveLength(4);
    expect(points.filter((p) => p.name === METRIC_NAMES.checkpointBytes).every((p) => p.unit === 'Bytes' && p.value > 0)).toBe(true);
  });

  it('count a run that fails after three failed attempts once, and its discarded usage', async () => {
    const { points, state } = await runAndCollect(() => ({ kind: 'invalid', reason: 'no tool call', usage: usage(10, 1), model: MODEL }));
    expect(state.status).toBe('failed');
    expect(total(points, METRIC_NAMES.failedAttempts)).toBe(3);
    expect(total(points, METRIC_NAMES.runsFailed)).toBe(1);
    expect(total(points, METRIC_NAMES.steps)).toBe(0);
    expect(total(points, METRIC_NAMES.inputTokens)).toBe(30);
  });
  it('count a run failed because its checkpoint cannot be read once, running or waiting when its timer comes', async () => {
    const waiting = defineAgent({ name: 'metrics-agent', tools: [requestApproval({ approvers: ['ops@example.com'] })] });
    for (const [label, of, script] of [
      ['running', agent, () => ({ kind: 'tool', tool: 'note', input: { n: 1 }, usage: usage(10, 1), model: MODEL })],
      ['waiting', waiting, () => ({ kind: 'tool', tool: 'request_approval', input: { request: 'go on?' }, usage: usage(10, 1), model: MODEL })],
    ] as const) {
      const { deps, runtime, clock } = worker(script as () => ModelReply, of);
      await start(deps);
      // One delivery: the run is running after its first step, or waiting with its timer queued.
      const [first] = await runtime.queue.receive({ visibilityMs: 30_000 });
      await handleDelivery(deps, first!);
      await runtime.queue.ack(first!);
      expect((await runtime.store.load('run'))!.status, label).toBe(label);
      // Its head no longer JSON (a fuzzer's find): the next delivery fails the run, keeping the data.
      runtime.db.prepare("UPDATE checkpoints SET head = ' ' || substr(head, 2) WHERE run_id = 'run'").run();
      clock.advance(4 * 24 * 3600_000);
      const points = await collect(deps, runtime, clock);
      expect((await runtime.store.load('run'))!.status, label).toBe('failed');
      expect(points, label).toEqual([{ name: METRIC_NAMES.runsFailed, unit: 'Count', value: 1 }]);
      runtime.close();
      cleanup?.();
    }
  });

  it('count the tokens of a run retried after it failed once: the failed part is not published again at its end', async () => {
    const { deps, runtime, clock } = worker((step, attempt) => attempt <= 3
      ? { kind: 'invalid', reason: 'no tool call', usage: usage(10, 1), model: MODEL }
      : { kind: 'done', summary: 'done at last', usage: usage(40, 30), model: MODEL });
    await start(deps);
    const points = await collect(deps, runtime, clock);
    expect(await retryRun(deps, 'run', {})).toMatchObject({ from: 'failed' });
    points.push(...await collect(deps, runtime, clock));
    const state = await loadState(runtime);
    runtime.close();
    expect(state).toMatchObject({ status: 'completed', usage: usage(70, 33) });
    expect(total(points, METRIC_NAMES.inputTokens)).toBe(70);
    expect(total(points, METRIC_NAMES.outputTokens)).toBe(33);
    expect(total(points, METRIC_NAMES.modelCostUsd)).toBeCloseTo(runCost(state, MODEL).usd, 12);
  });

  it('count the tokens of the model call that began a wait, answered outside the worker', async () => {
    const waiting = defineAgent({ name: 'metrics-agent', tools: [requestApproval({ approvers: ['ops@example.com'] })] });
    const { deps, runtime, clock } = worker((step) => step === 1
      ? { kind: 'tool', tool: 'request_approval', input: { request: 'go on?' }, usage: usage(100, 10), model: MODEL }
      : { kind: 'done', summary: 'approved and done', usage: usage(40, 30), model: MODEL }, waiting);
    await start(deps);
    const points = await collect(deps, runtime, clock);
    expect(await answerApproval(deps, 'run', { decision: 'approve' })).toMatchObject({ outcome: 'resumed' });
    points.push(...await collect(deps, runtime, clock));
    const state = await loadState(runtime);
    runtime.close();
    expect(state).toMatchObject({ status: 'completed', usage: usage(140, 40) });
    expect(total(points, METRIC_NAMES.inputTokens)).toBe(140);
    expect(total(points, METRIC_NAMES.outputTokens)).toBe(40);
    expect(total(points, METRIC_NAMES.modelCostUsd)).toBeCloseTo(runCost(state, MODEL).usd, 12);
  });
});
