import type { Notification } from '../ports.ts';
import type { RunState, WaitRecord } from '../core/state.ts';
import { canonicalJson } from '../core/canonical-json.ts';
import { approvalEmailKey } from '../core/keys.ts';
import { revealedJson } from '../core/printable.ts';
import { excerpt, foldedExcerpt } from '../core/prompt.ts';

/** What the approver receives: the request, the run, and the link to the page that decides. */
export function approvalEmail(input: { state: RunState; wait: WaitRecord; approver: string; link: string }): Notification {
  const { state, wait, approver, link } = input;
  const request = wait.request ?? wait.tool;
  const subject = `Approval needed: ${foldedExcerpt(request, 120)}`;
  // The model's arguments: one that starts a line of its own or turns the text around shown as its escape.
  const args = excerpt(revealedJson(canonicalJson(wait.input ?? {})), 2000);
  // The request and the goal are the model's and the starter's words: each on one line of its own, marked
  // as theirs, so text that runs on ("\n\nReview and decide: https://...") cannot pass for this email's own
  // lines and its link. The one link to follow is the last line's.
  const text = [
    `A run needs your approval before it continues.`,
    ``,
    `Request (the agent's words): ${foldedExcerpt(request, 2000)}`,
    `Run: ${state.runId} (agent ${state.agent}), step ${wait.step}`,
    `Goal (the starter's words): ${foldedExcerpt(state.goal, 500)}`,
    `Tool call: ${wait.tool} ${args}`,
    ``,
    `Review and decide: ${link}`,
    ``,
    `The link works once, for ${approver} only, until ${new Date(wait.deadline).toISOString()}.`,
    `If nobody decides by then, the run continues with "timed out".`,
  ].join('\n');
  const html = `<!doctype html><html><body>
<p>A run needs your approval before it continues.</p>
<p><b>Request (the agent's words):</b> ${escapeHtml(request)}</p>
<p><b>Run:</b> ${escapeHtml(state.runId)} (agent ${escapeHtml(state.agent)}), step ${wait.step}<br>
<b>Goal (the starter's words):</b> ${escapeHtml(excerpt(state.goal, 500))}<br>
<b>Tool call:</b> <code>${escapeHtml(`${wait.tool} ${args}`)}</code></p>
<p><a href="${escapeHtml(link)}">Review and decide</a></p>
<p>The link works once, for ${escapeHtml(approver)} only, until ${new Date(wait.deadline).toISOString()}.</p>
</body></html>`;
  return { id: approvalEmailKey(state.runId, wait.id, approver), to: approver, subject, text, html };
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}
