import type { RunState, StepRecord, Usage } from '../core/state.ts';
import { estimateCost, formatUsd, runCost } from '../llm/cost.ts';
import type { CheckpointInfo, RunSummary } from '../ports.ts';

/** Fixed-width columns, widths from the content; plain text so it pipes and diffs well. */
export function table(headers: string[], rows: (string | number | undefined)[][]): string {
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === undefined ? '' : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells.map((r) => r.map((c, i) => (i === r.length - 1 ? c : (c ?? '').padEnd(widths[i]!))).join('  ').trimEnd()).join('\n');
}

export const time = (ms: number): string => new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');

export function tokens(usage: Usage | undefined): string {
  if (!usage) return '';
  const total = usage.inputTokens + usage.outputTokens + usage.cacheWriteTokens + usage.cacheReadTokens;
  return total ? String(total) : '';
}

export function stepCost(record: StepRecord | undefined, fallbackModel: string): string {
  if (!record?.usage) return '';
  const cost = estimateCost(record.usage, record.model ?? fallbackModel);
  return cost ? formatUsd(cost.usd) : '';
}

/** Tokens and estimated cost of a whole run, or undefined when it used no tokens (an offline model). */
export function costLine(state: RunState, fallbackModel: string): string | undefined {
  const u = state.usage;
  if (!u.inputTokens && !u.outputTokens && !u.cacheWriteTokens && !u.cacheReadTokens) return undefined;
  const cost = runCost(state, fallbackModel);
  const tokenText = `input ${u.inputTokens}, output ${u.outputTokens}, cache write ${u.cacheWriteTokens}, cache read ${u.cacheReadTokens}`;
  if (!cost.priced) return `${tokenText}; no price known for the model`;
  return `${tokenText}; estimated ${formatUsd(cost.usd)} (${formatUsd(cost.uncachedUsd)} without prompt caching; ${(cost.cacheHitShare * 100).toFixed(0)}% of prompt tokens read from the cache)`;
}

/** The checkpoint timeline; with the run's state, each step's tokens and estimated cost too. */
export function historyTable(rows: CheckpointInfo[], state?: RunState, fallbackModel = ''): string {
  const byStep = new Map(state?.steps.map((s) => [s.step, s]));
  const stepOf = (h: CheckpointInfo) => (h.tool ? byStep.get(h.step) : undefined);
  const lines = [table(
    ['VERSION', 'STEP', 'STATUS', 'TOOL', 'IDEMPOTENCY KEY', 'WORKER', 'BYTES', 'TOKENS', 'COST', 'TIME'],
    rows.map((h) => [h.version, h.step, h.status, h.tool, h.idempotencyKey, h.workerId, h.bytes, tokens(stepOf(h)?.usage), stepCost(stepOf(h), fallbackModel), time(h.at)]),
  )];
  const total = state && costLine(state, fallbackModel);
  if (total) lines.push('', `total tokens: ${total}`);
  return lines.join('\n');
}

export function runsTable(rows: RunSummary[]): string {
  return table(['RUN', 'STATUS', 'STEP', 'VERSION', 'AGENT', 'UPDATED', 'REASON'],
    rows.map((r) => [r.runId, r.status, r.step, r.version, r.agent, time(r.updatedAt), r.reason]));
}

export function runDetail(state: RunState, version: number, fallbackModel = ''): string {
  const lines = [
    `run      ${state.runId}`,
    `status   ${state.status}${state.reason ? ` (${state.reason})` : ''}`,
    `agent    ${state.agent}`,
    `goal     ${state.goal}`,
    `step     ${state.step} of at most ${state.stepCap}, version ${version}`,
    `tokens   ${costLine(state, fallbackModel) ?? 'none (no model usage recorded)'}`,
  ];
  if (state.failures) lines.push(`failures ${state.failures} on step ${state.step + 1}: ${state.lastError ?? ''}`);
  if (state.pending) lines.push(`pending  step ${state.pending.step}: ${state.pending.tool} (decision recorded, key ${state.pending.idempotencyKey ?? '-'})`);
  if (state.summary) lines.push(`summary  ${state.summary}`);
  lines.push('', table(['STEP', 'TOOL', 'RESULT', 'WORKER', 'TOKENS', 'COST'], state.steps.map((s) => [
    s.step, s.tool, `${s.result.ok ? 'ok' : 'error'}: ${s.result.text.replace(/\s+/g, ' ').slice(0, 60)}${s.result.ref ? ` [${s.result.bytes} B by ref]` : ''}`, s.workerId, tokens(s.usage), stepCost(s, fallbackModel),
  ])));
  return lines.join('\n');
}
