import { DamagedBlobError } from '../../core/errors.ts';
import type { Budget, Decision, ForkedFrom, RunState, RunStatus, StepRecord, Usage, WaitRecord } from '../../core/state.ts';
import { runCost } from '../../llm/cost.ts';
import type { BlobStore, CheckpointStore } from '../../ports.ts';
import { pricingModelOf } from '../budget.ts';
import { readLastSteps } from './last-steps.ts';

/** A step as shown: its record, plus its whole output when asked for and stored by reference. */
export interface StepView extends StepRecord {
  /** The full output, fetched from the blob store (only with `full`, only for outputs stored by ref). */
  output?: string;
  /** The output's blob is not in the blob store. */
  outputMissing?: boolean;
  /**
   * The output's blob is in the blob store damaged (replaced, cut short): what is wrong with it. Lost as a
   * missing one is, so shown the same way, its excerpt all there is.
   */
  outputDamaged?: string;
}

/** A run as it stood after one of its steps (by default its latest), for `stepwise show` and the API. */
export interface RunView {
  runId: string;
  agent: string;
  goal: string;
  /** The run now: its latest status, version and completed steps. */
  status: RunStatus;
  version: number;
  step: number;
  stepCap: number;
  budget?: Budget;
  forkedFrom?: ForkedFrom;
  reason?: string;
  summary?: string;
  failures: number;
  lastError?: string;
  cancelRequested?: string;
  pending?: Decision;
  wait?: WaitRecord;
  /** The step this view stands after; `steps` are the first `atStep` steps, or with `last` the last of them. */
  atStep: number;
  /** With `last`, the steps before `steps`, left out (nor read): `steps` are steps stepsFrom + 1 to atStep. */
  stepsFrom?: number;
  /**
   * At the latest step, the run's usage (discarded model calls included); at an earlier step, the usage
   * of the first `atStep` steps' model calls.
   */
  usage: Usage;
  /** `unpriced`: the models of usage with no known price, left out of `usd` (see runCost). */
  cost: { usd: number; priced: boolean; unpriced?: string[] };
  steps: StepView[];
}

export interface ShowOptions {
  /** Show the state after this step (default: the latest). */
  step?: number;
  /** Fetch outputs stored by reference: true for every shown step, or only these steps. */
  full?: boolean | number[];
  /** Prices usage no step records a model for. */
  pricingModel?: string;
  /**
   * Only the last this many steps through `step`, read alone with the block summaries before them: a view
   * of a long run (its cost still every step's). Default: every step.
   */
  last?: number;
}

const BLOB_READS_AT_ONCE = 8;

/**
 * The step with its whole output from the blob store, when stored by reference. One step at a time, for
 * a caller that prints each before the next (`stepwise show --full`): a run's outputs together need not
 * fit in memory.
 */
export async function withOutput(blobs: BlobStore, record: StepRecord): Promise<StepView> {
  if (!record.result.ref) return record;
  let data: Buffer | undefined;
  try {
    data = await blobs.get(record.result.ref);
  } catch (error) {
    // Reading it again gives the same bytes: the step is shown with its excerpt, where the whole view
    // (a run's every step, with `--full`) failed on one output.
    if (error instanceof DamagedBlobError) return { ...record, outputDamaged: error.why };
    throw error;
  }
  return data ? { ...record, output: data.toString('utf8') } : { ...record, outputMissing: true };
}

export async function showRun(deps: { store: CheckpointStore; blobs: BlobStore }, runId: string, options: ShowOptions = {}): Promise<RunView> {
  return (await viewRun(deps, runId, options)).view;
}

/**
 * showRun's view, and the run after its step as a state (`at`): with `last`, it holds the summaries of the
 * blocks before the steps shown, which price the cost line `show` prints as the view's cost is priced.
 */
export async function viewRun(deps: { store: CheckpointStore; blobs: BlobStore }, runId: string, options: ShowOptions = {}): Promise<{ view: RunView; at: RunState }> {
  const read = await readLastSteps(deps.store, runId, 'show', { ...(options.step !== undefined ? { atStep: options.step } : {}), ...(options.last !== undefined ? { last: options.last } : {}) });
  const { stored, state, at } = read;
  const atStep = at.step;
  const wanted = options.full === true ? () => true : (n: number) => Array.isArray(options.full) && options.full.includes(n);
  const steps: StepView[] = read.steps.slice();
  // A few blobs at a time, not every one of a long run's outputs requested at once.
  const refs = steps.flatMap((record, i) => (record.result.ref && wanted(record.step) ? [i] : []));
  for (let i = 0; i < refs.length; i += BLOB_READS_AT_ONCE) {
    await Promise.all(refs.slice(i, i + BLOB_READS_AT_ONCE).map(async (at) => { steps[at] = await withOutput(deps.blobs, steps[at]!); }));
  }
  const view: RunView = {
    runId, agent: state.agent, goal: state.goal, status: state.status, version: stored.version, step: state.step, stepCap: state.stepCap,
    ...(state.budget ? { budget: state.budget } : {}), ...(state.forkedFrom ? { forkedFrom: state.forkedFrom } : {}),
    ...(state.reason ? { reason: state.reason } : {}), ...(state.summary ? { summary: state.summary } : {}),
    failures: state.failures, ...(state.lastError ? { lastError: state.lastError } : {}),
    ...(stored.cancelRequested !== undefined ? { cancelRequested: stored.cancelRequested } : {}),
    ...(atStep === state.step && state.pending ? { pending: state.pending } : {}),
    ...(atStep === state.step && state.wait ? { wait: state.wait } : {}),
    atStep, ...(read.left ? { stepsFrom: read.left } : {}), usage: at.usage, cost: costView(at, options.pricingModel), steps,
  };
  return { view, at };
}

/** A run's estimated cost as `show --json` and the API give it; `pricingModel` prices usage no step records a model for. */
export function costView(state: RunState, pricingModel?: string): RunView['cost'] {
  const cost = runCost(state, pricingModelOf(state, pricingModel) ?? '');
  return { usd: cost.usd, priced: cost.priced, ...(cost.unpriced.length ? { unpriced: cost.unpriced } : {}) };
}
