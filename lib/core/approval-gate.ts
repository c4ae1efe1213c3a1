import { InvalidInputError } from './errors.ts';
import { revealedJson } from './printable.ts';
import { excerpt } from './prompt.ts';
import type { RunState } from './state.ts';
import { WaitRequest, approvedBy, checkApprovers, checkWaitDuration } from './waits.ts';

/**
 * A tool whose every call a person approves before it runs (ToolDefinition.approval). request_approval is
 * a tool the model chooses to call, and nothing held the model to it: a model talked round by a tool's
 * output called the risky tool without asking, after a rejection, or with other arguments than those
 * approved. Here the engine asks, for the very call the model made, and runs that call, as it was made,
 * only on an approval; the model's own words can neither skip the question nor change the call. Pure.
 */

export interface ToolApproval {
  /** Email addresses allowed to approve (the email goes to each; any one answer decides). */
  approvers: string[];
  /** How long the approval may take before the call is refused as "timed out" (default 3 days). */
  timeoutMs?: number;
}

/** The most of a call's arguments an approval's request shows; the whole call is what runs. */
const REQUEST_ARGUMENTS_CHARS = 8000;

/** A tool's `approval`, checked when the agent loads: a gate that could never ask would block every call. */
export function checkToolApproval(tool: string, approval: unknown): void {
  const where = `tool ${tool}: approval`;
  if (!approval || typeof approval !== 'object' || Array.isArray(approval)) throw new InvalidInputError(`${where} must be { approvers: ["ops@example.com"], timeoutMs? }, not ${JSON.stringify(approval) ?? String(approval)}`);
  const { approvers, timeoutMs } = approval as Partial<ToolApproval>;
  checkApprovers(where, approvers);
  checkWaitDuration(`${where}: timeoutMs`, timeoutMs);
}

/**
 * The approval a call of such a tool waits for instead of running: the approver reads the call itself.
 * `parsed`: the input as the tool takes it (its schema's output), to name the fields the tool never gets.
 */
export function approvalOfCall(tool: { name: string; description: string }, input: unknown, approval: ToolApproval, parsed?: unknown): WaitRequest {
  // As the approver can read it: a character that hides or reorders text shown as its escape.
  const args = revealedJson(JSON.stringify(input ?? {}, null, 2));
  const shown = args.length <= REQUEST_ARGUMENTS_CHARS ? args : `${excerpt(args, REQUEST_ARGUMENTS_CHARS)} (${args.length} characters in all)`;
  const ignored = ignoredFields(input, parsed);
  // A field the schema drops reads as part of the call ("dry_run": true) though the tool never sees it.
  const note = ignored.length ? `\n${tool.name} does not take ${ignored.length === 1 ? 'the field' : 'the fields'} ${excerpt(ignored.map((f) => revealedJson(JSON.stringify(f))).join(', '), 500)}: its input drops ${ignored.length === 1 ? 'it' : 'them'}, and the call runs without.` : '';
  return new WaitRequest({
    kind: 'approval', approvers: approval.approvers, ...(approval.timeoutMs !== undefined ? { timeoutMs: approval.timeoutMs } : {}),
    request: `Run ${tool.name} (${tool.description}) with these arguments:\n${shown}${note}`,
  });
}

/** The top-level fields of a call that its tool's input schema dropped (zod's z.object strips the others). */
function ignoredFields(input: unknown, parsed: unknown): string[] {
  const plain = (value: unknown): value is Record<string, unknown> => !!value && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype;
  if (!plain(input) || !plain(parsed)) return [];
  return Object.keys(input).filter((key) => !Object.hasOwn(parsed, key));
}

/**
 * The call an approval at the run's last step admits: that step is such a tool's approval (a wait's
 * answer recorded under the tool's own name), answered "approved", and given in this run. A fork's copy of
 * its parent's approval admits nothing: the person approved the parent's call, not the fork's, whose goal
 * may be another; the fork's model is asked, and its call is approved anew. Undefined otherwise: the
 * model is asked, as at any step.
 */
export function approvedCall(state: RunState, needsApproval: (tool: string) => boolean): { tool: string; input: unknown } | undefined {
  const last = state.steps.at(-1);
  if (!last || last.step !== state.step || !needsApproval(last.tool)) return undefined;
  if (state.forkedFrom && last.step <= state.forkedFrom.step) return undefined;
  return approvedBy(last) !== undefined ? { tool: last.tool, input: last.input } : undefined;
}
