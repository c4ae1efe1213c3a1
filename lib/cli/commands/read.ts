import { NewerFormatError, UnknownRunError, UnreadableCheckpointError } from '../../core/errors.ts';
import type { RunStatus } from '../../core/state.ts';
import { InvalidInputError } from '../../core/errors.ts';
import { historyTable, runDetail, runsTable, shellWord } from '../format.ts';
import { estimateCost, lastModelOf, runCost } from '../../llm/cost.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { openBackend, storeFlags, type CliOptions } from '../backend.ts';

export interface ReadOptions extends CliOptions {
  json?: boolean;
  /** A run's last this many steps (status) or checkpoints (history). */
  last?: number;
  /** Every step or checkpoint of a run, however many. */
  all?: boolean;
  status?: string;
  /** Where the page before ended (its note prints it). */
  cursor?: string;
}

/** The runs a page of the table shows; the next page is one --cursor away. */
export const RUNS_SHOWN = 1000;

// The state schemas (and zod) load only to read a run's state or check --status: a table of runs needs
// neither, and is the command people run most.
const lastSteps = () => import('../../engine/operate/last-steps.ts');

/** `status [runId]`: one run in detail, or a table of runs. */
export async function statusCommand(runId: string | undefined, options: ReadOptions, out: (line: string) => void): Promise<number> {
  // Both choose the rows of the table. Given with a run id they were dropped without a word, the run shown
  // whatever its status; an empty --status (`--status "$S"`, S unset) listed every run, not none.
  if (runId && (options.status !== undefined || options.cursor !== undefined)) {
    throw new InvalidInputError(`--status and --cursor choose the runs of the table; with a run id, status shows that run whatever its status: leave them out, or the run id`);
  }
  if (!runId && (options.last !== undefined || options.all)) {
    throw new InvalidInputError(`--last and --all choose the steps of one run: give its id (stepwise status <runId> --last n); the table of runs pages with --cursor`);
  }
  if (options.status !== undefined) {
    const { RUN_STATUSES } = await import('../../core/state.ts');
    if (!RUN_STATUSES.includes(options.status as RunStatus)) throw new InvalidInputError(`--status must be one of ${RUN_STATUSES.join(', ')}, got ${JSON.stringify(options.status)}`);
  }
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    if (!runId) {
      const { listRunsPage } = await import('../../engine/operate/list.ts');
      const { runs, next } = await listRunsPage(runtime.store, {
        ...(options.status ? { status: options.status as RunStatus } : {}), limit: RUNS_SHOWN, ...(options.cursor ? { cursor: options.cursor } : {}),
      });
      out(options.json ? JSON.stringify(runs, null, 2) : runs.length ? runsTable(runs) : 'no runs');
      if (next) {
        // The next page's command reads the same store, pasted as it is printed.
        const again = `stepwise status${storeFlags(options)}${options.status ? ` --status ${options.status}` : ''} --cursor ${shellWord(next)}`;
        const note = `${RUNS_SHOWN} runs shown; the next ${RUNS_SHOWN}: ${again}`;
        // Under --json the note would break the JSON: it goes to stderr there.
        if (options.json) process.stderr.write(`stepwise: ${note}\n`);
        else out(`(${note})`);
      }
      return 0;
    }
    // A long run as a resume reads it, and its last steps alone (--last, --all): every record of a run of
    // 50,000 steps was read, and printed, for its status.
    const stored = await runtime.store.load(runId, { recent: true });
    if (!stored) throw new UnknownRunError(runId);
    const { readLastSteps, STEPS_SHOWN } = await lastSteps();
    let read;
    try {
      read = await readLastSteps(runtime.store, runId, 'show', { read: stored, ...shownSteps(options, STEPS_SHOWN) });
    } catch (error) {
      // An unreadable run still has a status and a reason to show. One written by newer code keeps its
      // status (nothing rewrites it); what it needs is said here.
      const cause = error instanceof InvalidInputError && error.cause instanceof Error ? error.cause : error;
      if (!(cause instanceof UnreadableCheckpointError || cause instanceof NewerFormatError)) throw error;
      const unreadable = cause.message;
      const needs = cause instanceof NewerFormatError ? cause.needs : undefined;
      out(options.json
        ? JSON.stringify({ runId, version: stored.version, status: stored.status, reason: stored.reason, ...(needs ? { needs } : {}), unreadable }, null, 2)
        : `run ${runId}: ${stored.status}${stored.reason ? ` (${stored.reason})` : ''}${needs ? `, but this code cannot resume it: it needs ${needs}` : ''}\n${unreadable}`);
      return 0;
    }
    const { at, left } = read;
    // Usage no record names a model for is priced by the run's last model, as GET /runs/:id and the budget price it.
    const pricing = lastModelOf(at) ?? pricingModel();
    const cancel = stored.cancelRequested !== undefined ? { cancelRequested: stored.cancelRequested } : {};
    if (options.json) {
      // The records as the whole run's state gives them, from step stepsFrom + 1 with --last.
      const { condensed: _condensed, stepsFrom: _from, ...state } = at;
      out(JSON.stringify({ version: stored.version, ...state, steps: read.steps, ...(left ? { stepsFrom: left } : {}), ...cancel, cost: runCost(at, pricing) }, null, 2));
    } else {
      out(runDetail(at, stored.version, pricing, { ...cancel, backend: runtime.kind, left }));
    }
    return 0;
  } finally {
    runtime.close();
  }
}

/**
 * How many of a run's last steps (or checkpoints) a command reads and prints: --last n, every one with
 * --all, and by default `shown` as text, every one as JSON (a script reads the whole list it always had).
 */
export function shownSteps(options: { json?: boolean; last?: number; all?: boolean }, shown: number): { last?: number } {
  if (options.all) return {};
  if (options.last !== undefined) return { last: options.last };
  return options.json ? {} : { last: shown };
}

/**
 * `history runId`: the checkpoint timeline; of a long run its last checkpoints, and the records of their
 * steps alone (--last, --all).
 */
export async function historyCommand(runId: string | undefined, options: ReadOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise history <runId>');
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    const { readLastSteps, STEPS_SHOWN } = await lastSteps();
    const { last } = shownSteps(options, STEPS_SHOWN);
    // One more than shown: whether earlier checkpoints are left out, without counting them.
    const read = await runtime.store.history(runId, last !== undefined ? { limit: last + 1 } : undefined);
    if (!read.length) throw new UnknownRunError(runId);
    const history = last !== undefined && read.length > last ? read.slice(1) : read;
    // The records of the steps the checkpoints shown name, from the earliest of them.
    const steps = last !== undefined ? { last: Math.max(1, history.at(-1)!.step - history[0]!.step + 1) } : {};
    let state;
    try { state = (await readLastSteps(runtime.store, runId, 'show', steps)).at; } catch { state = undefined; } // an unreadable run still has a timeline
    const pricing = (state && lastModelOf(state)) ?? pricingModel();
    if (options.json) {
      const byStep = new Map(state?.steps.map((s) => [s.step, s]));
      // A step's usage with its model and estimated cost, as the table's TOKENS and COST give them; `usd`
      // is left out for a model with no known price, never given as 0.
      out(JSON.stringify(history.map((h) => {
        const record = h.tool ? byStep.get(h.step) : undefined;
        if (!record?.usage) return h;
        const model = record.model ?? pricing;
        const cost = estimateCost(record.usage, model);
        return { ...h, usage: record.usage, model, ...(cost ? { usd: cost.usd } : {}) };
      }), null, 2));
    } else {
      const left = history.length < read.length ? `checkpoints before version ${history[0]!.version}` : undefined;
      out(historyTable(history, state, pricing, left));
    }
    return 0;
  } finally {
    runtime.close();
  }
}
