import type { Budget, ForkedFrom, RunState, StepRecord, Usage, WaitRecord } from '../core/state.ts';
import type { RunView, StepView } from '../engine/operate/show.ts';
import type { RunRow } from '../engine/operate/list.ts';
import { costText, formatUsd, runCost, stepCostText } from '../llm/cost.ts';
import type { CheckpointInfo } from '../ports.ts';
import { cutAt } from '../core/cut.ts';
import { escapeLineBreaks, printable, revealedJson } from '../core/printable.ts';
import { waitedFor } from '../core/waited-for.ts';

/** A word as a POSIX shell reads it back: as it is when plain, else in single quotes. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** Fixed-width columns, widths from the content; plain text so it pipes and diffs well. */
export function table(headers: string[], rows: (string | number | undefined)[][]): string {
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === undefined ? '' : printable(escapeLineBreaks(String(c))))))];
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
  return record ? stepCostText(record.usage, record.model ?? fallbackModel) : '';
}

/** Tokens and estimated cost of a whole run, or undefined when it used no tokens (an offline model). */
export function costLine(state: RunState, fallbackModel: string): string | undefined {
  const u = state.usage;
  if (!u.inputTokens && !u.outputTokens && !u.cacheWriteTokens && !u.cacheReadTokens) return undefined;
  const cost = runCost(state, fallbackModel);
  const tokenText = `input ${u.inputTokens}, output ${u.outputTokens}, cache write ${u.cacheWriteTokens}, cache read ${u.cacheReadTokens}`;
  // Usage of a model with no known price: the figure is what could be priced, said to be short of the whole.
  if (cost.unpriced.length) return `${tokenText}; ${cost.priced ? 'estimated ' : ''}${costText(cost)}`;
  return `${tokenText}; estimated ${formatUsd(cost.usd)} (${formatUsd(cost.uncachedUsd)} without prompt caching; ${(cost.cacheHitShare * 100).toFixed(0)}% of prompt tokens read from the cache)`;
}

/**
 * The checkpoint timeline; with the run's state, each step's tokens and estimated cost too. `left`: the
 * checkpoints before `rows`, left out.
 */
export function historyTable(rows: CheckpointInfo[], state?: RunState, fallbackModel = '', left?: string): string {
  const byStep = new Map(state?.steps.map((s) => [s.step, s]));
  const stepOf = (h: CheckpointInfo) => (h.tool ? byStep.get(h.step) : undefined);
  const lines = [table(
    ['VERSION', 'STEP', 'STATUS', 'TOOL', 'IDEMPOTENCY KEY', 'WORKER', 'BYTES', 'TOKENS', 'COST', 'TIME'],
    rows.map((h) => [h.version, h.step, h.status, h.tool, h.idempotencyKey, h.workerId, h.bytes, tokens(stepOf(h)?.usage), stepCost(stepOf(h), fallbackModel), time(h.at)]),
  )];
  const total = state && costLine(state, fallbackModel);
  if (total) lines.push('', `total tokens: ${total}`);
  if (left) lines.unshift(leftOutLine(left));
  if (state?.forkedFrom) lines.unshift(`forked ${forkedText(state.forkedFrom)}`);
  return lines.join('\n');
}

/**
 * The run table; a NEEDS column appears when a live run needs newer code than this to resume. A run with a
 * cancel not yet applied is still running: its status says the cancel is on its way.
 */
export function runsTable(rows: RunRow[]): string {
  const needs = rows.some((r) => r.needs);
  return table(['RUN', 'STATUS', 'STEP', 'VERSION', 'AGENT', 'UPDATED', 'REASON', ...(needs ? ['NEEDS'] : [])],
    rows.map((r) => [
      r.runId, r.cancelRequested !== undefined ? `${r.status}, cancel requested` : r.status, r.step, r.version, r.agent, time(r.updatedAt),
      r.reason ?? (r.wait ? `waits for ${waitedFor(r.wait)} until ${time(r.wait.deadline)}` : undefined), ...(needs ? [r.needs] : []),
    ]));
}

export function budgetText(budget: Budget): string {
  return [budget.tokens !== undefined ? `${budget.tokens} tokens` : '', budget.usd !== undefined ? `$${budget.usd}` : ''].filter(Boolean).join(', ');
}

export function forkedText(from: ForkedFrom): string {
  return `from ${from.runId} at step ${from.step} (version ${from.version})`;
}

/** The lines every view of a run starts with: who it is, what it is for, where it came from, its limits. */
function headLines(run: Pick<RunState, 'runId' | 'status' | 'reason' | 'agent' | 'goal' | 'forkedFrom' | 'budget'>, cancelRequested?: string): string[] {
  return [
    `run      ${run.runId}`,
    `status   ${run.status}${run.reason ? ` (${run.reason})` : ''}`,
    ...(cancelRequested !== undefined ? [`cancel   requested ${cancelRequested}; applied at the next step boundary`] : []),
    `agent    ${run.agent}`,
    `goal     ${run.goal}`,
    ...(run.forkedFrom ? [`forked   ${forkedText(run.forkedFrom)}`] : []),
    ...(run.budget ? [`budget   ${budgetText(run.budget)}`] : []),
  ];
}

/** The command that answers a wait: an approval's or an event's (a sleep has none: its time does). */
export function answerCommand(runId: string, wait: WaitRecord): string | undefined {
  return wait.kind === 'approval' ? `stepwise approve|reject ${runId}`
    : wait.kind === 'event' ? `stepwise emit ${wait.event?.type} ${wait.event?.key} [json]` : undefined;
}

/**
 * A waiting run's line in `status` and `show`: what it waits for, until when, and the command that answers
 * it. Past its deadline no answer is taken (an approval or an event is told "expired"), and nothing moves
 * the run until a worker takes its timer: said so, rather than a command that no longer answers it.
 */
function waitingLine(runId: string, wait: WaitRecord, now: number, backend: 'local' | 'aws' = 'local'): string {
  const head = `waiting  step ${wait.step}: ${waitedFor(wait)} until ${time(wait.deadline)} (wait ${wait.id})`;
  if (now >= wait.deadline) {
    // `run` works a run in its own process on the local backend only; on AWS a worker takes its timer.
    const here = backend === 'local' ? `, or \`stepwise run --agent <path> --run-id ${runId}\`,` : '';
    return `${head}; its deadline has passed: the next worker to take the run${here} resumes it with "${wait.kind === 'sleep' ? 'woke' : 'timed out'}"`;
  }
  const answer = answerCommand(runId, wait);
  return `${head}${answer ? `; answer: ${answer}` : ''}`;
}

/**
 * The call an approval is asked for, under the waiting line: `stepwise approve` is answered from here, and
 * for a tool with `approval` the approved call runs as it is shown (a request_approval shows its request).
 * A character that hides or turns text around shows as its escape, as on the approval page.
 */
function approvalCallLine(wait: WaitRecord, full = false): string[] {
  if (wait.kind !== 'approval') return [];
  const input = revealedJson(JSON.stringify(wait.input ?? {}));
  return [`call     ${wait.tool} ${full ? input : oneLine(input, INPUT_EXCERPT)}`];
}

/**
 * The line above the last steps (or checkpoints) of a run, where the earlier ones are left out: which, and
 * the flags that show them.
 */
export function leftOutLine(left: string): string {
  return `(${left} not shown: --last <n> shows the last n, --all every one)`;
}

/**
 * `status <runId>`. `left`: the steps before `state.steps` are left out (a long run's last steps, read alone
 * with the summaries of the blocks before them, which price the run as its records would).
 */
export function runDetail(
  state: RunState, version: number, fallbackModel = '', extra: { cancelRequested?: string; backend?: 'local' | 'aws'; left?: number } = {}, now = Date.now(),
): string {
  const lines = [
    ...headLines(state, extra.cancelRequested),
    `step     ${state.step} of at most ${state.stepCap}, version ${version}`,
    `tokens   ${costLine(state, fallbackModel) ?? 'none (no model usage recorded)'}`,
  ];
  if (state.failures) lines.push(`failures ${state.failures} on step ${state.step + 1}: ${state.lastError ?? ''}`);
  if (state.pending) lines.push(`pending  step ${state.pending.step}: ${state.pending.tool} (decision recorded, key ${state.pending.idempotencyKey ?? '-'})`);
  if (state.status === 'waiting' && state.wait) lines.push(waitingLine(state.runId, state.wait, now, extra.backend), ...approvalCallLine(state.wait));
  if (state.summary) lines.push(`summary  ${state.summary}`);
  lines.push('');
  if (extra.left) lines.push(leftOutLine(`steps 1-${extra.left}`));
  const shown = extra.left ? state.steps.filter((s) => s.step > extra.left!) : state.steps;
  lines.push(table(['STEP', 'TOOL', 'RESULT', 'WORKER', 'TOKENS', 'COST'], shown.map((s) => [
    s.step, s.tool, `${s.result.ok ? 'ok' : 'error'}: ${cutAt(s.result.text.replace(/\s+/g, ' '), 60)}${s.result.ref ? ` [${s.result.bytes} B by ref]` : ''}`, s.workerId, tokens(s.usage), stepCost(s, fallbackModel),
  ])));
  return lines.join('\n');
}

const INPUT_EXCERPT = 300;

/** `stepwise show`: the run's head, then every step with its call, arguments, result, key, worker and cost. */
export function showText(view: RunView, fallbackModel: string, options: { full?: boolean; now?: number; backend?: 'local' | 'aws' } = {}): string {
  return [showHeadText(view, fallbackModel, options), ...view.steps.map((s) => showStepText(s, fallbackModel, options))].join('\n');
}

/** What `show` prints above the steps: the run now, or as it stood after `atStep`. */
export function showHeadText(
  view: RunView, fallbackModel: string, options: { full?: boolean; now?: number; backend?: 'local' | 'aws'; at?: RunState } = {},
): string {
  // `at`, the run after the view's step as a state: a view of the last steps alone leaves out the records
  // that price the steps before them, and `at` holds their blocks' summaries.
  const state = options.at ?? { usage: view.usage, steps: view.steps, ...(view.wait ? { wait: view.wait } : {}) };
  const usage = costLine(state as RunState, fallbackModel);
  const lines = [
    ...headLines(view, view.cancelRequested),
    view.atStep === view.step
      ? `step     ${view.step} of at most ${view.stepCap}, version ${view.version}`
      : `step     state after step ${view.atStep} of ${view.step} (the run is now ${view.status} at version ${view.version})`,
    `tokens   ${usage ?? 'none (no model usage recorded)'}`,
  ];
  if (view.atStep === view.step) {
    if (view.failures) lines.push(`failures ${view.failures} on step ${view.step + 1}: ${view.lastError ?? ''}`);
    if (view.pending) lines.push(`pending  step ${view.pending.step}: ${view.pending.tool} ${excerpt(view.pending.input, options.full)} (decision recorded, key ${view.pending.idempotencyKey ?? '-'})`);
    if (view.wait) lines.push(waitingLine(view.runId, view.wait, options.now ?? Date.now(), options.backend), ...approvalCallLine(view.wait, options.full));
    if (view.summary) lines.push(`summary  ${view.summary}`);
  }
  return lines.join('\n');
}

/** One step as `show` prints it, after a blank line; its whole output when the step view carries it. */
export function showStepText(s: StepView, fallbackModel: string, options: { full?: boolean } = {}): string {
  const cost = stepCost(s, fallbackModel);
  const lines = ['', [
    `step ${s.step}`, s.tool, s.result.ok ? 'ok' : 'error', `worker ${s.workerId}`,
    ...(tokens(s.usage) ? [`tokens ${tokens(s.usage)}`] : []), ...(cost ? [`cost ${cost}`] : []), `at ${time(s.at)}`,
  ].join('  ')];
  if (s.idempotencyKey) lines.push(`  key     ${s.idempotencyKey}`);
  if (s.waitId) lines.push(`  wait    ${s.waitId}`);
  lines.push(`  input   ${excerpt(s.input, options.full)}`);
  if (s.output !== undefined) {
    // One string, not a line each: spread into push, an output of a few hundred thousand lines (a 5 MB
    // log) passed each as an argument and overflowed the stack.
    lines.push(`  result  (${s.result.bytes} B from ${s.result.ref})`, `    ${s.output.replaceAll('\n', '\n    ')}`);
  } else {
    // As the input: a result's text comes from a tool reading outside data, and is shown revealed too.
    lines.push(`  result  ${revealedJson(options.full ? s.result.text : oneLine(s.result.text, INPUT_EXCERPT))}`);
    if (s.outputMissing) lines.push(`          (the full ${s.result.bytes} B were stored as ${s.result.ref}, which the blob store no longer has)`);
    else if (s.outputDamaged !== undefined) lines.push(`          (the full ${s.result.bytes} B were stored as ${s.result.ref}, which the blob store gives back damaged: ${s.outputDamaged})`);
    else if (s.result.ref) lines.push(`          (${s.result.bytes} B stored by ref ${s.result.ref}; --full shows it)`);
  }
  return lines.join('\n');
}

/**
 * A call's arguments as the operator can read them: a character that hides or reorders text as its escape
 * (revealedJson), as the approval's page and email show it; `"\u202eswor_dlo"` printed raw read as old_rows.
 */
function excerpt(value: unknown, full = false): string {
  const text = revealedJson(JSON.stringify(value ?? null));
  return full ? text : oneLine(text, INPUT_EXCERPT);
}

/** A text on one line, cut past `max` characters with its size said. */
export function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max)}... (${Buffer.byteLength(text)} B)` : flat;
}
