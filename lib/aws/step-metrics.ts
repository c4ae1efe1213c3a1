import type { Usage } from '../core/state.ts';
import { isTerminal } from '../core/state.ts';
import { carriedUsage } from '../core/condensed.ts';
import type { Handled } from '../engine/handle-message.ts';
import { estimateCost, runCost } from '../llm/cost.ts';
import { METRIC_NAMES } from '../settings.ts';

export interface MetricPoint {
  name: (typeof METRIC_NAMES)[keyof typeof METRIC_NAMES];
  unit: 'Count' | 'Bytes' | 'None';
  value: number;
}

/**
 * What one handled message adds to the worker's metrics. Tokens and cost come from the step record a
 * commit appends (the model call that chose the step) and, when the run ends, from the usage no record
 * carries (discarded replies, the DONE reply), so over a run they add up to exactly the run's usage.
 * Pure: the Lambda entry point (functions/worker.ts) publishes the points.
 */
export function stepMetrics(handled: Handled, fallbackModel: string): MetricPoint[] {
  if (handled.action !== 'ack' || handled.outcome?.kind !== 'advanced') return [];
  const { state, bytes, appended } = handled.outcome;
  const points: MetricPoint[] = [{ name: METRIC_NAMES.checkpointBytes, unit: 'Bytes', value: bytes }];
  if (appended) {
    points.push({ name: METRIC_NAMES.steps, unit: 'Count', value: 1 });
    if (appended.usage) points.push(...usagePoints(appended.usage, estimateCost(appended.usage, appended.model ?? fallbackModel)?.usd));
  } else if (state.status === 'failed' || (state.status === 'running' && state.failures > 0)) {
    points.push({ name: METRIC_NAMES.failedAttempts, unit: 'Count', value: 1 });
  }
  if (state.status === 'failed') points.push({ name: METRIC_NAMES.runsFailed, unit: 'Count', value: 1 });
  if (state.status === 'completed') points.push({ name: METRIC_NAMES.runsCompleted, unit: 'Count', value: 1 });
  if (isTerminal(state.status)) {
    // The records of condensed blocks may not be held (a bounded load): their summaries carry their usage.
    const rest = unrecordedUsage(state.usage, [carriedUsage(state)]);
    // Priced like runCost prices the usage no record carries: by the fallback model, 0 if it has no price.
    if (rest) points.push(...usagePoints(rest, runCost({ usage: rest, steps: [] }, fallbackModel).usd));
  }
  return points;
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

/** The run's usage that no step record carries, or undefined when there is none. */
function unrecordedUsage(total: Usage, carried: (Usage | undefined)[]): Usage | undefined {
  const rest = { ...total };
  for (const usage of carried) {
    if (!usage) continue;
    rest.inputTokens -= usage.inputTokens;
    rest.outputTokens -= usage.outputTokens;
    rest.cacheReadTokens -= usage.cacheReadTokens;
    rest.cacheWriteTokens -= usage.cacheWriteTokens;
  }
  return rest.inputTokens + rest.outputTokens + rest.cacheReadTokens + rest.cacheWriteTokens > 0 ? rest : undefined;
}
