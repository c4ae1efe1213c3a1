import type { RunState, StepRecord, WaitRecord } from '../core/state.ts';
import { failureDelayMs, type Handled } from '../engine/handle-message.ts';
import { waitedFor } from '../core/waited-for.ts';
import { cutAt } from '../core/cut.ts';
import { escapeLineBreaks } from '../core/printable.ts';

/** One human line per handled message, for `run` and `worker` on stdout (logs go to stderr as JSON). */
export function progressLine(handled: Handled): string | undefined {
  if (handled.action === 'release' && handled.busy) return busyLine(handled.runId, handled.busy, handled.delayMs);
  if (handled.action !== 'ack' || !handled.outcome || handled.outcome.kind !== 'advanced') return undefined;
  const { state, version, bytes } = handled.outcome;
  const where = `run ${state.runId} v${version}`;
  // A summary, a reason and an error span lines as often as not (a model's text, a tool's error, a zod
  // issue list): kept to one line, the step's, where their later lines read as lines of no step.
  if (state.status === 'completed') return `${where}  completed after ${state.step} step${state.step === 1 ? '' : 's'}: ${escapeLineBreaks(state.summary ?? '')}`;
  if (state.status === 'waiting' && state.wait) return waitingLine(where, state.wait, handled.approvalLinks ?? []);
  if (state.status !== 'running') return `${where}  ${state.status}: ${escapeLineBreaks(state.reason ?? '')}`;
  if (state.failures) return `${where}  step ${state.step + 1} attempt ${state.failures} failed: ${escapeLineBreaks(state.lastError ?? '')} (will retry in ${failureDelayMs(state.failures, handled.outcome.retryAfterMs) / 1000} s)`;
  const last = state.steps[state.steps.length - 1];
  if (!last) return undefined;
  return recordLine(where, last, bytes);
}

/** A completed step: its tool, its result's start and where it was kept. */
export function recordLine(where: string, record: StepRecord, bytes: number): string {
  const result = cutAt(record.result.text.replace(/\s+/g, ' '), 70);
  return `${where}  step ${record.step}  ${record.tool}  ${record.result.ok ? 'ok' : 'error'}: ${result}  (${bytes} B${record.idempotencyKey ? `, key ${record.idempotencyKey}` : ''})`;
}

/** The line of a run now: what `run` prints of its last step, for the state a store holds (`stepwise watch`). */
export function stateLine(state: RunState, version: number, bytes: number): string | undefined {
  return progressLine({ action: 'ack', runId: state.runId, outcome: { kind: 'advanced', state, version, bytes } });
}

/** A run that just began waiting: what for, until when, and the approval links (the emails hold them too). */
function waitingLine(where: string, wait: WaitRecord, links: string[]): string {
  const until = new Date(wait.deadline).toISOString();
  return [`${where}  step ${wait.step}  waiting for ${waitedFor(wait)} until ${until}`, ...links.map((l) => `  approve or reject: ${l}`)].join('\n');
}

/**
 * A step whose idempotency key an earlier try still claims: after a crash inside an effect, the next try
 * waits out that try's lease (up to a minute) rather than apply the effect beside it. Said, so the wait is
 * not taken for a hang.
 */
function busyLine(runId: string | undefined, busy: { key: string; leaseUntil: number }, delayMs: number): string {
  const until = Number.isFinite(busy.leaseUntil) ? ` until ${new Date(busy.leaseUntil).toISOString()}` : '';
  return `run ${runId ?? '?'}  key ${busy.key} is held by an earlier try${until} (its worker may have stopped inside the effect): trying again in ${Math.ceil(delayMs / 1000)} s`;
}
