import * as z from 'zod';

import { RECORD_FORMATS } from './record-formats.ts';

export { RECORD_FORMATS, type RecordKind } from './record-formats.ts';
/** The run head's format: what `formatVersion` in a head says. */
export const FORMAT_VERSION = RECORD_FORMATS.head;
export const DEFAULT_STEP_CAP = 60;
export const MAX_STEP_FAILURES = 3;
/**
 * A step's failed tries while the model is unavailable (ModelUnavailableError) before its run fails: with
 * the retries' backoff (1 s, 2 s, ... a minute at most) about 25 minutes of outage, plus the calls' own time.
 */
export const MAX_MODEL_UNAVAILABLE_FAILURES = 30;
export const MAX_GOAL_BYTES = 16 * 1024;
/**
 * Characters of a failed try's error kept as the run's last error and reason. A tool may throw with a
 * whole command output or response body in its message; the head is rewritten at every checkpoint and
 * both go into the checkpoint's log line and the progress line.
 */
export const MAX_ERROR_CHARS = 2000;

import { RUN_STATUSES, type RunStatus } from './statuses.ts';

export { RUN_STATUSES, TERMINAL_STATUSES, isTerminal, type RunStatus } from './statuses.ts';

// Every stored shape is strict: a field this code does not know is refused on load (codec.ts), never
// silently stripped and then lost at the next write.
export const usageSchema = z.strictObject({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  cacheWriteTokens: z.number().int().nonnegative(),
  cacheReadTokens: z.number().int().nonnegative(),
});
export type Usage = z.infer<typeof usageSchema>;
// Keys in order here and in addUsage: a head's usage is then stored without a sorted copy (canonical-json.ts).
export const ZERO_USAGE: Usage = { cacheReadTokens: 0, cacheWriteTokens: 0, inputTokens: 0, outputTokens: 0 };

/** A tool's output as stored: inline when small, otherwise an excerpt plus a content-addressed blob ref. */
export const stepResultSchema = z.strictObject({
  ok: z.boolean(),
  text: z.string(),
  bytes: z.number().int().nonnegative(),
  ref: z.string().optional(),
});
export type StepResult = z.infer<typeof stepResultSchema>;

/** What the model chose for a step, recorded before a side-effecting tool runs. */
export const decisionSchema = z.strictObject({
  step: z.number().int().positive(),
  tool: z.string(),
  input: z.unknown(),
  idempotencyKey: z.string().optional(),
  usage: usageSchema.optional(),
  /** The model that chose this step, for its cost. */
  model: z.string().optional(),
  at: z.number(),
  /**
   * The run's version when the model chose this step. Once the run is past it, a failed attempt has
   * counted the decision's usage, and completing the step must not count it again. Not kept in the record.
   */
  atVersion: z.number().int().positive().optional(),
});
export type Decision = z.infer<typeof decisionSchema>;

/** One completed step: immutable once written; the run's state is the head plus these. */
export const stepRecordSchema = decisionSchema.extend({
  result: stepResultSchema,
  workerId: z.string(),
  /** Set when the step was a wait: which wait its result answered. */
  waitId: z.string().optional(),
});
export type StepRecord = z.infer<typeof stepRecordSchema>;

export const WAIT_KINDS = ['approval', 'event', 'sleep'] as const;
export type WaitKind = (typeof WAIT_KINDS)[number];

/** What a waiting run waits for (lib/core/waits.ts has the rules). Part of the head: written once per wait. */
export const waitRecordSchema = z.strictObject({
  /** Random per wait: names it in approval tokens, event matches and answers. */
  id: z.string().min(8),
  kind: z.enum(WAIT_KINDS),
  /** The step this wait belongs to (state.step + 1); its answer becomes that step's result. */
  step: z.number().int().positive(),
  /** The tool call that asked to wait, as the model chose it: it becomes the step record on resume. */
  tool: z.string(),
  input: z.unknown(),
  usage: usageSchema.optional(),
  model: z.string().optional(),
  decidedAt: z.number(),
  startedAt: z.number(),
  /** Epoch ms. At the deadline the wait resolves as timed out (for `sleep`, as woken). */
  deadline: z.number(),
  /** approval: who may answer, and what they are asked. */
  approvers: z.array(z.string()).optional(),
  request: z.string().optional(),
  /** event: what resumes it. */
  event: z.strictObject({ type: z.string(), key: z.string() }).optional(),
  /**
   * The agent's inlineLimit when it set one: the answer is shaped where it arrives (an API, an event
   * handler, the CLI), which may not hold the agent, so the worker that began the wait records it.
   */
  inlineLimit: z.number().int().nonnegative().optional(),
});
export type WaitRecord = z.infer<typeof waitRecordSchema>;

/** What a run may spend: it stops as `over-budget` before the model call that would go past either. */
export const budgetSchema = z.object({
  /** Every token the model took or gave: input, output, cache writes and cache reads. */
  tokens: z.number().int().positive().optional(),
  /** Estimated from the recorded usage and the price table in lib/llm/cost.ts. */
  usd: z.number().positive().optional(),
});
export type Budget = z.infer<typeof budgetSchema>;

/** Where a fork came from: its first `step` steps are copies of that run's, read at that version. */
export const forkedFromSchema = z.object({
  runId: z.string().min(1),
  step: z.number().int().nonnegative(),
  version: z.number().int().positive(),
});
export type ForkedFrom = z.infer<typeof forkedFromSchema>;

/** Everything about a run except its step records: small, rewritten at every checkpoint. */
export const runHeadSchema = z.strictObject({
  formatVersion: z.literal(FORMAT_VERSION),
  runId: z.string().min(1),
  agent: z.string(),
  goal: z.string(),
  status: z.enum(RUN_STATUSES),
  /** Completed steps. The next step to run is step + 1. */
  step: z.number().int().nonnegative(),
  stepCap: z.number().int().positive(),
  /** Failed attempts of step + 1 so far. */
  failures: z.number().int().nonnegative(),
  lastError: z.string().optional(),
  /** Shown to the model as the last result when its previous reply could not be used. */
  retryNote: z.string().optional(),
  /** Why the run ended, when it did not complete. */
  reason: z.string().optional(),
  /** The model's DONE summary. */
  summary: z.string().optional(),
  usage: usageSchema,
  /** Present while status is `waiting` (format 2). */
  wait: waitRecordSchema.optional(),
  budget: budgetSchema.optional(),
  forkedFrom: forkedFromSchema.optional(),
  createdAt: z.number(),
  updatedAt: z.number(),
});
export type RunHead = z.infer<typeof runHeadSchema>;

/**
 * What a condensed block's step records cost, each priced by the model that chose it when the block was
 * condensed (lib/llm/cost.ts blockCost): written only when every record with usage names its model.
 */
export const blockCostSchema = z.strictObject({
  usd: z.number().nonnegative(),
  /** The same requests with no prompt caching. */
  uncachedUsd: z.number().nonnegative(),
  /** Models of the block's usage with no known price, left out of `usd` ('' for none named). */
  unpriced: z.array(z.string()).optional(),
  /** Some record's usage was priced (absent when none was: an offline model's records carry none). */
  priced: z.literal(true).optional(),
  /** The last model the block's records name: the run's, for a state that holds none of its later records. */
  model: z.string().optional(),
});
export type BlockCost = z.infer<typeof blockCostSchema>;

/**
 * A condensed block of steps as stored (lib/core/condense.ts): written once by the checkpoint that
 * condenses it, so a resume reads this in place of the block's records. The records stay in the store.
 */
export const condensedBlockSchema = z.strictObject({
  /** The block's last step: it covers the CONDENSE_BLOCK steps up to this one. */
  last: z.number().int().positive(),
  /** The block's line in the prompt's completed-steps list, as the prompt shows it. */
  line: z.string(),
  /** The usage the block's step records carry, summed: the run's totals without reading the records. */
  usage: usageSchema,
  /** Format 2: what the block's records cost, so a dollar budget and a run's cost need not read them. */
  cost: blockCostSchema.optional(),
});
export type CondensedBlock = z.infer<typeof condensedBlockSchema>;

/** The whole run, as the engine sees it. Stores persist the head per version and each step once. */
export interface RunState extends RunHead {
  /**
   * The completed steps' records in step order, from step stepsFrom + 1: every one, unless the state
   * came from a bounded load (CheckpointStore.load with `recent`), which leaves out condensed blocks.
   */
  steps: StepRecord[];
  /** Completed steps before steps[0] that this state does not hold; each is in a block of `condensed`. */
  stepsFrom?: number;
  /** The stored summaries of the run's first condensed blocks, in order (from a bounded load). */
  condensed?: CondensedBlock[];
  /** The recorded decision for step + 1, if the model already chose it. */
  pending?: Decision;
}

export function headOf(state: RunState): RunHead {
  const { steps: _steps, pending: _pending, stepsFrom: _from, condensed: _condensed, ...head } = state;
  return head;
}

/** What `after` counts beyond `before` (a run's usage at two versions), or undefined when nothing. */
export function usageAdded(after: Usage, before: Usage): Usage | undefined {
  if (after.inputTokens === before.inputTokens && after.outputTokens === before.outputTokens
    && after.cacheReadTokens === before.cacheReadTokens && after.cacheWriteTokens === before.cacheWriteTokens) return undefined;
  return {
    cacheReadTokens: after.cacheReadTokens - before.cacheReadTokens,
    cacheWriteTokens: after.cacheWriteTokens - before.cacheWriteTokens,
    inputTokens: after.inputTokens - before.inputTokens,
    outputTokens: after.outputTokens - before.outputTokens,
  };
}

export function addUsage(a: Usage, b: Usage | undefined): Usage {
  if (!b) return a;
  return {
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
  };
}
