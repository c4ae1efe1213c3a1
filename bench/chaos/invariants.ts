/**
 * The invariants every chaos schedule must keep, checked from what was stored and what was applied, for
 * both runtimes (anything with the store's load and history). Independent of how the faults were made.
 */
import { decodeState } from '../../lib/core/codec.ts';
import { UnreadableCheckpointError } from '../../lib/core/errors.ts';
import { approvedBy } from '../../lib/core/waits.ts';
import type { StepRecord } from '../../lib/core/state.ts';
import type { BlobStore, CheckpointStore } from '../../lib/ports.ts';

/** A run of the chaos agent: step n calls the tool the script names for n, with input {n}, then DONE. */
export interface RunExpectation {
  runId: string;
  steps: number;
  /** The tool step n must call (chaos agents alternate an exact effect and a ledger-only effect, and may wait once). */
  toolOf(step: number): string;
}

/** A wait's step result when its deadline passed first: the model then takes the wait's timeout branch. */
const TIMED_OUT = '"timedOut":true';

/** The reason a run that took its wait's timeout branch ended for: `injected` must accept it. */
export const waitTimedOut = (runId: string): string => `${runId}: its wait timed out`;

/** How often each idempotency key's effect was really applied (not merely called). */
export type Applications = ReadonlyMap<string, number>;

export type ViolationKind =
  | 'applied-twice' | 'step-lost' | 'phantom-effect' | 'history' | 'steps' | 'stuck' | 'reason' | 'incomplete' | 'ledger' | 'wait-twice' | 'blob'
  | 'unreadable' | 'ungated';

export interface Violation { runId: string; kind: ViolationKind; detail: string }

export interface Verdict {
  violations: Violation[];
  completed: number;
  failed: number;
  completedSteps: number;
  appliedTwice: number;
  stepsLost: number;
  stuck: number;
  /** Runs that ended through their wait's timeout branch (the model saw "timed out" and finished). */
  timedOut: number;
  /** Waits resolved more than once (must be 0). */
  waitsTwice: number;
  /** Step outputs stored by reference that were read back whole (CheckInput.blobs). */
  blobsChecked: number;
  reasons: string[];
}

export interface CheckInput {
  store: Pick<CheckpointStore, 'load' | 'history'>;
  runs: readonly RunExpectation[];
  applied: Applications;
  /** Whether a failed or timed-out run's reason is one of the faults the schedule injected. */
  injected(reason: string): boolean;
  /**
   * Whether the idempotency ledger has a result on record for a key, when every tool applies through
   * `ctx.once`: a completed step's key without one would let a later attempt apply the effect again.
   */
  ledgerHasResult?(key: string): Promise<boolean>;
  /** How many answers reported resolving each wait (`runId/waitId`): resumed it, or moved it on as expired. */
  answers?: ReadonlyMap<string, number>;
  /** The time the check is made at: a run still waiting past its deadline is stuck for sure. */
  now?: number;
  /** The runtime's blobs: every step record's output stored by reference must be there, whole. */
  blobs?: Pick<BlobStore, 'get'>;
  /**
   * The effects of tools a person approves (ToolDefinition.approval) that were applied: idempotency key to
   * the tool. Each must follow an approval of that very call, recorded at the step before the key's own.
   */
  gated?: ReadonlyMap<string, string>;
}

export async function checkInvariants(input: CheckInput): Promise<Verdict> {
  const verdict: Verdict = { violations: [], completed: 0, failed: 0, completedSteps: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, timedOut: 0, waitsTwice: 0, blobsChecked: 0, reasons: [] };
  const flag = (runId: string, kind: ViolationKind, detail: string) => verdict.violations.push({ runId, kind, detail });

  for (const key of [...input.applied.keys()].sort()) {
    const times = input.applied.get(key)!;
    if (times > 1) { verdict.appliedTwice += times - 1; flag(key.split('/')[0]!, 'applied-twice', `${key} applied ${times} times`); }
  }
  for (const [key, times] of [...(input.answers ?? new Map<string, number>())].sort(([a], [b]) => a.localeCompare(b))) {
    if (times > 1) { verdict.waitsTwice++; flag(key.split('/')[0]!, 'wait-twice', `${key} resolved ${times} times`); }
  }

  for (const run of input.runs) {
    const stored = await input.store.load(run.runId);
    if (!stored) { flag(run.runId, 'stuck', 'no checkpoint at all'); verdict.stuck++; continue; }
    let state: ReturnType<typeof decodeState>;
    try {
      state = decodeState(stored);
    } catch (error) {
      // A record the head counts is gone (a lost checkpoint row takes its step's record with it): a lost step.
      if (!(error instanceof UnreadableCheckpointError)) throw error;
      verdict.stepsLost++;
      flag(run.runId, 'unreadable', error.message);
      continue;
    }

    // Every version present once and in order; steps never go back.
    const history = await input.store.history(run.runId);
    const versions = history.map((h) => h.version);
    if (versions.some((v, i) => v !== i + 1) || versions.at(-1) !== stored.version) {
      flag(run.runId, 'history', `versions ${versions.join(',')} (latest ${stored.version})`);
    }
    for (let i = 1; i < history.length; i++) {
      const gap = history[i]!.step - history[i - 1]!.step;
      if (gap < 0 || gap > 1) flag(run.runId, 'history', `step ${history[i - 1]!.step} -> ${history[i]!.step} at version ${history[i]!.version}`);
    }

    // No step repeated or skipped: step n is the n-th record and did what step n is for.
    state.steps.forEach((s, i) => {
      const n = i + 1;
      const input = s.input as { n?: unknown } | undefined;
      // A wait step's input is the wait's (who approves, which event): its tool says what it was for.
      if (s.step !== n || s.tool !== run.toolOf(n) || (!s.waitId && input?.n !== n)) {
        flag(run.runId, 'steps', `record ${n} is step ${s.step} ${s.tool}(${JSON.stringify(s.input)})`);
      }
    });

    // Each wait resolved once: a second resolution would complete a second step with the same wait.
    const waitSteps = new Map<string, number[]>();
    for (const s of state.steps) if (s.waitId) waitSteps.set(s.waitId, [...(waitSteps.get(s.waitId) ?? []), s.step]);
    for (const [waitId, steps] of waitSteps) {
      if (steps.length > 1) { verdict.waitsTwice++; flag(run.runId, 'wait-twice', `wait ${waitId} completed steps ${steps.join(', ')}`); }
    }
    const timedOutAt = state.steps.find((s) => s.waitId && s.result.text.includes(TIMED_OUT))?.step;

    // Each completed step's effect applied exactly once; no effect of a step that never completed, in a run that did.
    const done = new Set<string>();
    for (const s of state.steps) {
      if (!s.idempotencyKey) continue;
      done.add(s.idempotencyKey);
      const times = input.applied.get(s.idempotencyKey) ?? 0;
      if (times === 0) { verdict.stepsLost++; flag(run.runId, 'step-lost', `step ${s.step} completed but ${s.idempotencyKey} was never applied`); }
      if (input.ledgerHasResult && !(await input.ledgerHasResult(s.idempotencyKey))) {
        flag(run.runId, 'ledger', `step ${s.step} completed but the ledger has no result for ${s.idempotencyKey}`);
      }
    }
    // A record's large output is readable: no record was written without its blob, none was swept while referred to.
    if (input.blobs) {
      for (const s of state.steps) {
        if (!s.result.ref) continue;
        const blob = await input.blobs.get(s.result.ref);
        if (blob?.length === s.result.bytes) verdict.blobsChecked++;
        else flag(run.runId, 'blob', `step ${s.step}'s output ${s.result.ref} is ${blob ? `${blob.length} bytes, not ${s.result.bytes}` : 'missing'}`);
      }
    }
    for (const detail of ungatedEffects(run.runId, state.steps, input.gated ?? new Map())) flag(run.runId, 'ungated', detail);
    verdict.completedSteps += state.steps.length;
    if (state.status === 'completed') {
      for (const key of input.applied.keys()) {
        if (key.startsWith(`${run.runId}/`) && !done.has(key)) flag(run.runId, 'phantom-effect', `${key} applied but no completed step has it`);
      }
    }

    // Each run completed, or failed or timed out for an injected fault.
    if (state.status === 'completed' && timedOutAt !== undefined) {
      // The timeout branch: the model finished right after its wait timed out.
      verdict.timedOut++;
      verdict.reasons.push(waitTimedOut(run.runId));
      if (!input.injected(waitTimedOut(run.runId))) flag(run.runId, 'reason', `its wait timed out, but nobody let it time out`);
      if (state.steps.length !== timedOutAt) flag(run.runId, 'incomplete', `completed after ${state.steps.length} steps; its wait timed out at step ${timedOutAt}`);
    } else if (state.status === 'completed') {
      verdict.completed++;
      if (state.steps.length !== run.steps) {
        verdict.stepsLost += Math.max(0, run.steps - state.steps.length);
        flag(run.runId, 'incomplete', `completed after ${state.steps.length} of ${run.steps} steps`);
      }
    } else if (state.status === 'failed') {
      verdict.failed++;
      const reason = state.reason ?? state.lastError ?? '(no reason)';
      verdict.reasons.push(reason);
      if (!input.injected(reason)) flag(run.runId, 'reason', `${state.status} for a fault nobody injected: ${reason}`);
    } else if (state.status === 'waiting' && state.wait && input.now !== undefined && state.wait.deadline <= input.now) {
      verdict.stuck++;
      flag(run.runId, 'stuck', `left waiting past its deadline (${new Date(state.wait.deadline).toISOString()}) at version ${stored.version}, nothing moved it`);
    } else if (state.status === 'running' || state.status === 'waiting') {
      verdict.stuck++;
      flag(run.runId, 'stuck', `left ${state.status} at version ${stored.version} (step ${state.step}) with nothing to move it`);
    } else {
      flag(run.runId, 'reason', `ended ${state.status}`);
    }
  }
  return verdict;
}

/**
 * A gated effect ran only on an approval of that very call: the record before its step is that tool's
 * approval, answered "approved", and the step that ran it (once recorded) ran the call as it was approved.
 * `gated`: applied keys to their tools, of every run; what is wrong with this run's, one line each.
 */
export function ungatedEffects(runId: string, steps: readonly StepRecord[], gated: ReadonlyMap<string, string>): string[] {
  const wrong: string[] = [];
  for (const [key, tool] of gated) {
    if (!key.startsWith(`${runId}/`)) continue;
    const step = Number(/\/step-(\d+)$/.exec(key)?.[1]);
    const gate = steps[step - 2];
    const ran = steps[step - 1];
    if (!gate || gate.tool !== tool || approvedBy(gate) === undefined) {
      wrong.push(`${tool} applied under ${key} without an approval at step ${step - 1} (${gate ? `${gate.tool}: ${gate.result.text.slice(0, 80)}` : 'no record'})`);
    } else if (ran && (ran.tool !== tool || JSON.stringify(ran.input) !== JSON.stringify(gate.input))) {
      wrong.push(`step ${step} ran ${ran.tool}(${JSON.stringify(ran.input)}), not the call approved at step ${step - 1}: ${tool}(${JSON.stringify(gate.input)})`);
    }
  }
  return wrong;
}
