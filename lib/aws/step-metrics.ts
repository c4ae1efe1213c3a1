import type { RunState, StepRecord, Usage } from '../core/state.ts';
import type { Handled } from '../engine/handle-message.ts';
import { estimateCost, lastModelOf, runCost } from '../llm/cost.ts';
import { METRIC_NAMES } from '../settings.ts';

export interface MetricPoint {
  name: (typeof METRIC_NAMES)[keyof typeof METRIC_NAMES];
  unit: 'Count' | 'Bytes' | 'None';
  value: number;
}

/**
 * What one handled message adds to the worker's metrics. Tokens and cost are the usage its checkpoint
 * added to the run's (Advance.added): a step's model call, a discarded reply, the DONE reply, the call
 * that began a wait. Each is counted by the checkpoint that counts it in the run, once, so over a run they
 * add up to exactly its usage, the calls of waits answered outside the worker and of a run retried after
 * its end included. Pure: the Lambda entry point (functions/worker.ts) publishes the points.
 */
export function stepMetrics(handled: Handled, fallbackModel: string): MetricPoint[] {
  // A run failed because its checkpoint could not be read wrote no step: a failed run all the same.
  if (handled.action === 'ack' && handled.failedNow) return [{ name: METRIC_NAMES.runsFailed, unit: 'Count', value: 1 }];
  if (handled.action !== 'ack' || handled.outcome?.kind !== 'advanced') return [];
  const { state, bytes, appended, added } = handled.outcome;
  const points: MetricPoint[] = [{ name: METRIC_NAMES.checkpointBytes, unit: 'Bytes', value: bytes }];
  if (appended) {
    points.push({ name: METRIC_NAMES.steps, unit: 'Count', value: 1 });
  } else if (state.status === 'failed' || (state.status === 'running' && state.failures > 0)) {
    points.push({ name: METRIC_NAMES.failedAttempts, unit: 'Count', value: 1 });
  }
  if (state.status === 'failed') points.push({ name: METRIC_NAMES.runsFailed, unit: 'Count', value: 1 });
  if (state.status === 'completed') points.push({ name: METRIC_NAMES.runsCompleted, unit: 'Count', value: 1 });
  if (added) points.push(...usagePoints(added, addedCost(added, state, appended, fallbackModel)));
  return points;
}

/**
 * Priced by the model that made the call, where the run records one (the step's, the wait's, a recorded
 * decision's, counted by the failed try of its tool), else as runCost prices the usage no record carries:
 * by the model that answered last, the fallback if none did, at 0 when it has no price.
 */
function addedCost(added: Usage, state: RunState, appended: StepRecord | undefined, fallbackModel: string): number | undefined {
  if (appended) return estimateCost(added, appended.model ?? fallbackModel)?.usd;
  const model = state.wait?.model ?? state.pending?.model ?? lastModelOf(state);
  return runCost({ usage: added, steps: [] }, model ?? fallbackModel).usd;
}

function usagePoints(usage: Usage, usd: number | undefined): MetricPoint[] {
  return [
    { name: METRIC_NAMES.inputTokens, unit: 'Count', value: usage.inputTokens },
    { name: METRIC_NAMES.outputTokens, unit: 'Count', value: usage.outputTokens },
    { name: METRIC_NAMES.cacheReadTokens, unit: 'Count', value: usage.cacheReadTokens },
    { name: METRIC_NAMES.cacheWriteTokens, unit: 'Count', value: usage.cacheWriteTokens },
    ...(usd !== undefined ? [{ name: METRIC_NAMES.modelCostUsd, unit: 'None' as const, value: usd }] : []),
  ];
}
