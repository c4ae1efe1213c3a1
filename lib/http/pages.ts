import type { MiddlewareHandler } from 'hono';
import { html, raw } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';
import { canonicalJson } from '../core/canonical-json.ts';
import { revealedJson } from '../core/printable.ts';
import { excerpt } from '../core/prompt.ts';
import type { RunState, StepRecord, WaitRecord } from '../core/state.ts';
import { describeAnswer } from '../core/waits.ts';
import type { AnswerOutcome } from '../waits/answer.ts';

/**
 * Server-rendered pages. Every interpolation in an `html` template is escaped by hono/html, so goals,
 * tool arguments, model text and comments show as text, whatever they contain.
 */

export type Page = HtmlEscapedString | Promise<HtmlEscapedString>;

const STYLE = `body{font:15px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.35rem}pre{background:#f4f4f4;padding:.75rem;overflow:auto;white-space:pre-wrap;word-break:break-word}
.meta{color:#555}.actions{display:flex;flex-wrap:wrap;gap:.75rem;margin-top:1rem}button{font:inherit;padding:.5rem 1.25rem;border-radius:6px;border:1px solid #888;cursor:pointer}
button.approve{background:#1f7a3a;color:#fff;border-color:#1f7a3a}button.reject{background:#a32121;color:#fff;border-color:#a32121}
textarea{width:100%;min-height:4rem;font:inherit}.outcome{padding:.75rem;border-radius:6px;background:#eef4ff}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top;font-size:.9rem}`;

export function layout(title: string, body: Page): Page {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="robots" content="noindex,nofollow"><title>${title}</title><style>${raw(STYLE)}</style></head>
<body>${body}</body></html>`;
}

export function approvalPage(input: { state: RunState; wait: WaitRecord; approver: string }): Page {
  const { state, wait, approver } = input;
  const recent = state.steps.slice(-5);
  return layout('Approval needed', html`
<h1>Approval needed</h1>
<p class="meta">Run <code>${state.runId}</code> of agent <code>${state.agent}</code>, step ${wait.step}. You are answering as <b>${approver}</b>.
This link expires ${new Date(wait.deadline).toISOString()}.</p>
<h2>What is to be approved</h2>
<pre id="request">${wait.request ?? ''}</pre>
<h2>The tool call</h2>
<pre id="tool-call">${wait.tool} ${revealedJson(JSON.stringify(wait.input ?? {}, null, 2))}</pre>
<h2>The run's goal</h2>
<pre id="goal">${state.goal}</pre>
${recent.length ? html`<h2>Its last steps</h2><table id="steps"><tr><th>step</th><th>tool</th><th>result</th></tr>
${recent.map((s) => html`<tr><td>${s.step}</td><td>${s.tool} <code>${excerpt(canonicalJson(s.input ?? {}), 200)}</code></td><td>${s.result.ok ? 'ok' : 'error'}: ${excerpt(s.result.text, 300)}</td></tr>`)}
</table>` : ''}
<form method="post">
<label for="comment">Comment (the run's model sees it)</label>
<textarea id="comment" name="comment" maxlength="4000"></textarea>
<div class="actions">
<button class="approve" type="submit" name="decision" value="approve">Approve</button>
<button class="reject" type="submit" name="decision" value="reject">Reject</button>
</div>
</form>`);
}

export function messagePage(title: string, message: string, detail?: string): Page {
  return layout(title, html`<h1>${title}</h1><p class="outcome" id="outcome">${message}</p>${detail ? html`<pre>${detail}</pre>` : ''}`);
}

/**
 * The page for an answer that was not taken, saying what became of the wait instead: answered by whom,
 * expired, the run cancelled or waiting for another answer. The approval page and the inspector alike.
 */
export function notTakenPage(outcome: Exclude<AnswerOutcome, { outcome: 'resumed' }>): { page: Page; status: 403 | 404 | 409 | 410 } {
  switch (outcome.outcome) {
    case 'already-answered':
      return { page: messagePage('Nothing to decide', describeAnswer(outcome.record)), status: 409 };
    case 'expired':
      return { page: messagePage('Too late', `The approval expired at ${new Date(outcome.deadline).toISOString()}; the run continued with "timed out".`), status: 410 };
    case 'not-waiting':
      return { page: messagePage('Nothing to decide', notWaiting(outcome.current !== undefined, outcome.status)), status: 409 };
    case 'unknown-run':
      return { page: messagePage('Unknown run', `Run ${outcome.runId} does not exist (any more).`), status: 404 };
    case 'refused':
      return { page: messagePage('Not allowed', outcome.reason), status: 403 };
  }
}

/** Why a link has nothing to decide: the run moved on to another wait, or is no longer waiting at all. */
export function notWaiting(waitsForAnother: boolean, status: string): string {
  return waitsForAnother ? 'This run is waiting for another answer now, not for this approval.' : `This run is no longer waiting for this approval (it is ${status}).`;
}

/**
 * Headers for every page: never cached, never framed, no sniffing, and a CSP with no script at all. The
 * approval pages' token is in the URL, so they also send no Referer.
 */
export function pageHeaders(extra: { noReferrer?: boolean } = {}): MiddlewareHandler {
  return async (c, next) => {
    await next();
    c.header('Cache-Control', 'no-store');
    if (extra.noReferrer) c.header('Referrer-Policy', 'no-referrer');
    c.header('X-Frame-Options', 'DENY');
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('Content-Security-Policy', "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'");
  };
}
