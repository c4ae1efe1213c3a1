import type { RunState, Usage } from '../core/state.ts';
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

export function historyTable(rows: CheckpointInfo[]): string {
  return table(
    ['VERSION', 'STEP', 'STATUS', 'TOOL', 'IDEMPOTENCY KEY', 'WORKER', 'BYTES', 'TIME'],
    rows.map((h) => [h.version, h.step, h.status, h.tool, h.idempotencyKey, h.workerId, h.bytes, time(h.at)]),
  );
}

export function runsTable(rows: RunSummary[]): string {
  return table(['RUN', 'STATUS', 'STEP', 'VERSION', 'AGENT', 'UPDATED', 'REASON'],
    rows.map((r) => [r.runId, r.status, r.step, r.version, r.agent, time(r.updatedAt), r.reason]));
}

export function runDetail(state: RunState, version: number): string {
  const lines = [
    `run      ${state.runId}`,
    `status   ${state.status}${state.reason ? ` (${state.reason})` : ''}`,
    `agent    ${state.agent}`,
    `goal     ${state.goal}`,
    `step     ${state.step} of at most ${state.stepCap}, version ${version}`,
    `tokens   input ${state.usage.inputTokens}, output ${state.usage.outputTokens}, cache write ${state.usage.cacheWriteTokens}, cache read ${state.usage.cacheReadTokens}`,
  ];
  if (state.failures) lines.push(`failures ${state.failures} on step ${state.step + 1}: ${state.lastError ?? ''}`);
  if (state.pending) lines.push(`pending  step ${state.pending.step}: ${state.pending.tool} (decision recorded, key ${state.pending.idempotencyKey ?? '-'})`);
  if (state.summary) lines.push(`summary  ${state.summary}`);
  lines.push('', table(['STEP', 'TOOL', 'RESULT', 'WORKER', 'TOKENS'], state.steps.map((s) => [
    s.step, s.tool, `${s.result.ok ? 'ok' : 'error'}: ${s.result.text.replace(/\s+/g, ' ').slice(0, 60)}${s.result.ref ? ` [${s.result.bytes} B by ref]` : ''}`, s.workerId, tokens(s.usage),
  ])));
  return lines.join('\n');
}
