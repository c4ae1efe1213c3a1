import { html, raw } from 'hono/html';
import { canonicalJson } from '../core/canonical-json.ts';
import { cutAt } from '../core/cut.ts';
import { defaultRaisedCap } from '../core/operate.ts';
import { excerpt } from '../core/prompt.ts';
import type { RunState, StepRecord } from '../core/state.ts';
import { RUN_STATUSES, type RunStatus } from '../core/statuses.ts';
import { costText, runCost, stepCostText } from '../llm/cost.ts';
import type { CheckpointInfo, RunSummary } from '../ports.ts';
import { layout, type Page } from './pages.ts';

/**
 * The run inspector: every run, and one run's checkpoint timeline with tokens and cost per step. All text
 * from runs (goals, arguments, results, reasons) goes through hono/html's escaping. Such text inside a
 * line of the page's own words is in a <bdi>: a right-to-left override in a failure's reason (a tool's
 * error message) or a cancel's would otherwise reverse the rest of the line, the step and the cost.
 */

/** Said to be UTC: a browser's reader, elsewhere, took a bare time for their own. */
const time = (ms: number) => `${new Date(ms).toISOString().replace('T', ' ').slice(0, 19)} UTC`;
/** A length of time, roughly: 45 s, 12 min, 5 h, 30 d. */
const span = (ms: number) => {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : s < 172_800 ? `${Math.round(s / 3600)} h` : `${Math.round(s / 86_400)} d`;
};
const age = (ms: number, now: number) => span(now - ms);
const tokensOf = (s?: { usage?: StepRecord['usage'] }) => (s?.usage ? s.usage.inputTokens + s.usage.outputTokens + s.usage.cacheWriteTokens + s.usage.cacheReadTokens : 0);
/** A step's cost, 'no price' for a model with none: it showed $0.0000, as though the step were free. */
const costOf = (s: StepRecord, model: string) => stepCostText(s.usage, s.model ?? model);

export function runsPage(input: { root: string; runs: { summary: RunSummary & { cancelRequested?: string }; state?: RunState; needs?: string }[]; now: number; model: string; older?: string; status?: RunStatus }) {
  return layout('Runs', html`
<h1>Runs</h1>
<p id="statuses">${[undefined, ...RUN_STATUSES].map((status, i) => html`${i ? ' · ' : ''}${status === input.status ? html`<b>${status ?? 'all'}</b>` : html`<a href="${input.root}${status ? `?status=${status}` : ''}">${status ?? 'all'}</a>`}`)}</p>
<table id="runs"><tr><th>run</th><th>agent</th><th>status</th><th>step</th><th>age</th><th>cost</th><th>goal</th></tr>
${input.runs.map(({ summary, state, needs }) => html`<tr>
<td><a href="${input.root}/runs/${encodeURIComponent(summary.runId)}">${summary.runId}</a></td><td class="agent">${summary.agent}</td><td class="status">${summary.status}${summary.cancelRequested !== undefined ? html` <span class="cancel-requested">(cancel requested)</span>` : ''}${needs ? html` <span class="needs">(needs ${needs})</span>` : ''}</td><td>${summary.step}</td>
<td>${state ? age(state.createdAt, input.now) : ''}</td><td>${state ? listedCost(state, input.model) : ''}</td>
<td>${state ? excerpt(state.goal, 120) : summary.reason ?? ''}</td></tr>`)}
</table>
${input.runs.some((r) => r.state && runCost(r.state, input.model).approximate) ? html`<p id="approximate">≈: read from its recent steps, a long run's earlier steps summarised by an older release are priced by the model that answered last; its own page prices every step by its model.</p>` : ''}
${input.older ? html`<p><a id="older" href="${input.older}">older runs</a></p>` : ''}`);
}

/** A listed run's cost, marked ≈ where its earlier steps' summaries do not say theirs (runCost's `approximate`). */
function listedCost(state: RunState, model: string): string {
  const cost = runCost(state, model);
  return `${cost.approximate ? '≈ ' : ''}${costText(cost)}`;
}

/** How many checkpoints a run's page shows at a time, the newest first (`older` links to the next). */
export const RUN_PAGE_CHECKPOINTS = 200;

/**
 * `cancelRequested`: a cancel asked for and not yet applied (the run is running until a worker applies it).
 * `actions`: the forms that answer, fork, retry and cancel; without them, `notHere` says why.
 */
export function runPage(input: {
  /** Where the inspector is, as the browser sees it: /inspect, behind any prefix a proxy serves the app under. */
  root: string;
  state: RunState; version: number; history: CheckpointInfo[]; model: string; actions: boolean; now: number; cancelRequested?: string; notHere?: string;
  /** The records of the steps `history` names (default: those `state` holds): a long run's are read a page at a time. */
  records?: readonly StepRecord[];
  /** Links to the page of older checkpoints and back to the newest, when there are such pages. */
  pages?: { older?: string; newest?: string };
}) {
  const { state, history, model } = input;
  const records = input.records ?? state.steps;
  const byStep = new Map(records.map((s) => [s.step, s]));
  // The chart covers the steps of the checkpoints shown, as the timeline does.
  const shown = new Set(history.map((h) => h.step));
  const pages = input.pages ?? {};
  const base = `${input.root}/runs/${encodeURIComponent(state.runId)}`;
  const cost = runCost(state, model);
  return layout(`Run ${state.runId}`, html`
<p><a href="${input.root}">all runs</a></p>
<h1>Run <code id="run-id">${state.runId}</code></h1>
<p class="meta">agent <code>${state.agent}</code>, status <b id="status">${state.status}</b>${state.reason ? html` (<bdi id="reason">${state.reason}</bdi>)` : ''}, step ${state.step} of at most ${state.stepCap}, version ${input.version}, estimated cost ${costText(cost)}</p>
${state.forkedFrom ? html`<p id="forked-from">forked from <a href="${input.root}/runs/${encodeURIComponent(state.forkedFrom.runId)}">${state.forkedFrom.runId}</a> after its step ${state.forkedFrom.step} (version ${state.forkedFrom.version})</p>` : ''}
<h2>Goal</h2><pre id="goal">${state.goal}</pre>
${input.cancelRequested !== undefined ? html`<p id="cancel-requested">cancel requested <bdi>${input.cancelRequested}</bdi>; applied at the next step boundary (a step running now finishes first), when a worker takes the run's next message</p>` : ''}
${state.summary ? html`<h2>Summary</h2><pre id="summary">${state.summary}</pre>` : ''}
${attemptLines(state)}
${state.wait ? waitPanel(state, base, input.now, input.actions && input.cancelRequested === undefined) : ''}
${input.actions ? actionsPanel(state, base) : ''}
${input.notHere !== undefined ? html`<p id="not-here">${input.notHere}</p>` : ''}
<h2>Tokens and cost per step</h2>
${raw(chart(records.filter((s) => shown.has(s.step)), model))}
<h2>Timeline</h2>
${pages.newest || pages.older ? html`<p class="pages">checkpoints ${history[0]?.version ?? ''}-${history.at(-1)?.version ?? ''} of ${input.version}${pages.newest ? html` · <a id="newest" href="${pages.newest}">newest</a>` : ''}${pages.older ? html` · <a id="older" href="${pages.older}">older checkpoints</a>` : ''}</p>` : ''}
<table id="timeline"><tr><th>version</th><th>step</th><th>status</th><th>tool</th><th>arguments</th><th>result</th><th>worker</th><th>bytes</th><th>tokens</th><th>cost</th><th>time</th></tr>
${history.map((h) => {
    const record = h.tool ? byStep.get(h.step) : undefined;
    return html`<tr class="checkpoint" data-version="${h.version}">
<td>${h.version}</td><td>${record ? html`<a class="step" href="${base}/steps/${h.step}">${h.step}</a>` : h.step}</td><td>${h.status}</td><td>${h.tool ?? ''}</td>
<td><code>${record ? excerpt(canonicalJson(record.input ?? {}), 160) : ''}</code></td>
<td>${record ? `${record.result.ok ? 'ok' : 'error'}: ${excerpt(record.result.text, 200)}` : ''}</td>
<td>${h.workerId}</td><td>${h.bytes}</td><td>${record ? tokensOf(record) : ''}</td><td>${record ? costOf(record, model) : ''}</td><td>${time(h.at)}</td></tr>`;
  })}
</table>`);
}

/** The most of a step's output its page holds: the whole, however large, is at the page's output link. */
export const STEP_PAGE_OUTPUT_CHARS = 1_000_000;

/**
 * One step whole: the timeline shows 160 characters of its arguments and 200 of its output, and an output
 * stored by reference (over the inline limit, in the blob store) could be read only through the API or
 * `stepwise show --full`. `output` is the blob's text; `outputMissing`, a ref the blob store no longer has;
 * `outputDamaged`, what is wrong with a blob it gives back damaged.
 */
export function stepPage(input: { root: string; runId: string; record: StepRecord & { output?: string; outputMissing?: boolean; outputDamaged?: string }; model: string }) {
  const { runId, record } = input;
  const run = `${input.root}/runs/${encodeURIComponent(runId)}`;
  const whole = record.output ?? record.result.text;
  const stored = record.result.ref ? html` from the blob store as <code>${record.result.ref}</code>` : '';
  let note: Page | string = '';
  if (record.outputMissing) note = html`<p id="output-missing">The whole output (${record.result.bytes} bytes) was stored as <code>${record.result.ref}</code>, which the blob store no longer has: this is its excerpt.</p>`;
  else if (record.outputDamaged !== undefined) note = html`<p id="output-damaged">The whole output (${record.result.bytes} bytes) was stored as <code>${record.result.ref}</code>, which the blob store gives back damaged (${record.outputDamaged}): this is its excerpt.</p>`;
  else if (whole.length > STEP_PAGE_OUTPUT_CHARS) note = html`<p id="output-cut">The first ${STEP_PAGE_OUTPUT_CHARS.toLocaleString('en')} of its ${whole.length.toLocaleString('en')} characters; <a id="whole" href="${run}/steps/${record.step}/output">the whole output</a> as plain text.</p>`;
  return layout(`Run ${runId}, step ${record.step}`, html`
<p><a href="${run}">run ${runId}</a></p>
<h1>Step ${record.step} of run <code>${runId}</code></h1>
<p class="meta">tool <code id="tool">${record.tool}</code>, chosen ${time(record.at)}, by worker <code>${record.workerId}</code>${record.idempotencyKey ? html`, idempotency key <code>${record.idempotencyKey}</code>` : ''}; ${tokensOf(record)} tokens, ${costOf(record, input.model)}</p>
<h2>Arguments</h2>
<pre id="arguments">${JSON.stringify(record.input ?? {}, null, 2)}</pre>
<h2>Result: ${record.result.ok ? 'ok' : 'error'}, ${record.result.bytes} bytes${stored}</h2>
${note}
<pre id="output">${whole.length > STEP_PAGE_OUTPUT_CHARS ? cutAt(whole, STEP_PAGE_OUTPUT_CHARS) : whole}</pre>
<p><a id="raw" href="${run}/steps/${record.step}/output">as plain text</a></p>`);
}

/**
 * The failed attempts at the next step and the decision recorded for it, as `stepwise show` says them: a
 * run retrying a failing tool showed as running with no word of why, the tool's error nowhere on the page.
 */
function attemptLines(state: RunState) {
  const { failures, lastError, pending } = state;
  return html`${failures ? html`<p id="failures">${failures} failed attempt${failures === 1 ? '' : 's'} at step ${state.step + 1}, the last: <bdi id="last-error">${lastError ?? ''}</bdi></p>` : ''}
${pending ? html`<p id="pending">step ${pending.step}: ${pending.tool} <bdi><code>${excerpt(canonicalJson(pending.input ?? {}), 160)}</code></bdi>, decided and recorded before its tool ran (idempotency key <code>${pending.idempotencyKey ?? '-'}</code>); its result is not yet recorded</p>` : ''}`;
}

/**
 * What the run waits for and until when, and how far off that is. Past the deadline no answer is taken (a
 * late Approve resumed the run with "timed out"), so the form is left out and the page says what moves the
 * run, as `stepwise show` does.
 */
function waitPanel(state: RunState, base: string, now: number, answerable: boolean) {
  const wait = state.wait!;
  const passed = now >= wait.deadline;
  const when = passed
    ? html`: its deadline passed ${span(now - wait.deadline)} ago, and the next worker to take the run resumes it with "${wait.kind === 'sleep' ? 'woke' : 'timed out'}"`
    : html` (in ${span(wait.deadline - now)})`;
  return html`<h2>Waiting</h2>
<p id="wait">for ${wait.kind === 'approval' ? `approval by ${(wait.approvers ?? []).join(', ')}` : wait.kind === 'event' ? `event ${wait.event?.type} ${wait.event?.key}` : 'its time'} (step ${wait.step}, ${wait.tool}), until ${time(wait.deadline)}${when}</p>
${wait.request ? html`<pre id="wait-request">${wait.request}</pre>` : ''}
${wait.kind === 'approval' && !passed && answerable ? html`<form method="post" action="${base}/waits/${encodeURIComponent(wait.id)}" class="actions">
${(wait.approvers ?? []).length > 1 ? html`<label>answering as <select name="as">${(wait.approvers ?? []).map((a) => html`<option>${a}</option>`)}</select></label>` : ''}
<label>comment (the run's model sees it) <input type="text" name="comment" maxlength="4000"></label>
<button class="approve" type="submit" name="decision" value="approve">Approve</button>
<button class="reject" type="submit" name="decision" value="reject">Reject</button></form>` : ''}`;
}

function actionsPanel(state: RunState, base: string) {
  const live = state.status === 'running' || state.status === 'waiting';
  // A retry of a capped run given no cap gets the raised one (retryState); a fork keeps its parent's.
  const retryCap = state.status === 'capped' ? defaultRaisedCap(state) : state.stepCap;
  return html`<h2>Actions</h2><div class="actions">
<form method="post" action="${base}/fork"><label>fork from step <input type="number" name="fromStep" min="0" max="${state.step}" value="${state.step}"></label> ${limitFields(state, state.stepCap)} <button id="fork" type="submit">Fork</button></form>
${live ? html`<form method="post" action="${base}/cancel"><button id="cancel" type="submit">Cancel</button></form>` : ''}
${!live && state.status !== 'completed' && state.status !== 'cancelled' ? html`<form method="post" action="${base}/retry">${limitFields(state, retryCap)} <button id="retry" type="submit">Retry</button></form>` : ''}
</div>`;
}

/**
 * The step cap and budget a fork or retry takes, as `stepwise fork` and `retry` do: left empty, the run's
 * own (the placeholder). A capped run forked at its last step, or an over-budget run retried, needs them.
 */
function limitFields(state: RunState, cap: number) {
  return html`<label>step cap <input type="number" name="stepCap" min="1" step="1" placeholder="${cap}"></label>
<label>token budget <input type="number" name="budgetTokens" min="1" step="1" placeholder="${state.budget?.tokens ?? 'none'}"></label>
<label>dollar budget <input type="text" name="budgetUsd" inputmode="decimal" pattern="\\d+\\.?\\d*|\\.\\d+" placeholder="${state.budget?.usd ?? 'none'}"></label>`;
}

/** Bars of tokens per step with the cost as a title: plain SVG, no script. */
function chart(steps: StepRecord[], model: string): string {
  const width = 640;
  const height = 120;
  const max = Math.max(1, ...steps.map(tokensOf));
  const bar = steps.length ? Math.max(1, Math.floor(width / steps.length)) : width;
  const bars = steps.map((s, i) => {
    const h = Math.round((tokensOf(s) / max) * (height - 10));
    const title = `step ${s.step}: ${tokensOf(s)} tokens${s.usage ? `, ${costOf(s, model)}` : ''}`;
    return `<rect x="${i * bar}" y="${height - h}" width="${Math.max(1, bar - 1)}" height="${h}" fill="#3b6ea8"><title>${title}</title></rect>`;
  });
  return `<svg id="chart" role="img" aria-label="tokens per step" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" xmlns="http://www.w3.org/2000/svg">${bars.join('')}</svg>`;
}
