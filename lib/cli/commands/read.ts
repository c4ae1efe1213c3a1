import { NewerFormatError, UnknownRunError } from '../../core/errors.ts';
import type { RunStatus } from '../../core/state.ts';
import { InvalidInputError } from '../../core/errors.ts';
import { historyTable, runDetail, runsTable, shellWord } from '../format.ts';
import { estimateCost, runCost } from '../../llm/cost.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { openBackend, storeFlags, type CliOptions } from '../backend.ts';

export interface ReadOptions extends CliOptions {
  json?: boolean;
  status?: string;
  /** Where the page before ended (its note prints it). */
  cursor?: string;
}

/** The runs a page of the table shows; the next page is one --cursor away. */
export const RUNS_SHOWN = 1000;

// The state schemas (and zod) load only to read a run's state or check --status: a table of runs needs
// neither, and is the command people run most.
const codec = () => import('../../core/codec.ts');

/** `status [runId]`: one run in detail, or a table of runs. */
export async function statusCommand(runId: string | undefined, options: ReadOptions, out: (line: string) => void): Promise<number> {
  // Both choose the rows of the table. Given with a run id they were dropped without a word, the run shown
  // whatever its status; an empty --status (`--status "$S"`, S unset) listed every run, not none.
  if (runId && (options.status !== undefined || options.cursor !== undefined)) {
    throw new InvalidInputError(`--status and --cursor choose the runs of the table; with a run id, status shows that run whatever its status: leave them out, or the run id`);
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
    const stored = await runtime.store.load(runId);
    if (!stored) throw new UnknownRunError(runId);
    const { decodeState } = await codec();
    let state;
    try {
      state = decodeState(stored);
    } catch (error) {
      // An unreadable run still has a status and a reason to show. One written by newer code keeps its
      // status (nothing rewrites it); what it needs is said here.
      const unreadable = (error as Error).message;
      const needs = error instanceof NewerFormatError ? error.needs : undefined;
      out(options.json
        ? JSON.stringify({ runId, version: stored.version, status: stored.status, reason: stored.reason, ...(needs ? { needs } : {}), unreadable }, null, 2)
        : `run ${runId}: ${stored.status}${stored.reason ? ` (${stored.reason})` : ''}${needs ? `, but this code cannot resume it: it needs ${needs}` : ''}\n${unreadable}`);
      return 0;
    }
    const cancel = stored.cancelRequested !== undefined ? { cancelRequested: stored.cancelRequested } : {};
    out(options.json
      ? JSON.stringify({ version: stored.version, ...state, ...cancel, cost: runCost(state, pricingModel()) }, null, 2)
      : runDetail(state, stored.version, pricingModel(), { ...cancel, backend: runtime.kind }));
    return 0;
  } finally {
    runtime.close();
  }
}

/** `history runId`: the checkpoint timeline. */
export async function historyCommand(runId: string | undefined, options: ReadOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise history <runId>');
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    const history = await runtime.store.history(runId);
    if (!history.length) throw new UnknownRunError(runId);
    const stored = await runtime.store.load(runId);
    const { decodeState } = await codec();
    let state;
    try { state = stored && decodeState(stored); } catch { state = undefined; } // an unreadable run still has a timeline
    if (options.json) {
      const byStep = new Map(state?.steps.map((s) => [s.step, s]));
      // A step's usage with its model and estimated cost, as the table's TOKENS and COST give them; `usd`
      // is left out for a model with no known price, never given as 0.
      out(JSON.stringify(history.map((h) => {
        const record = h.tool ? byStep.get(h.step) : undefined;
        if (!record?.usage) return h;
        const model = record.model ?? pricingModel();
        const cost = estimateCost(record.usage, model);
        return { ...h, usage: record.usage, model, ...(cost ? { usd: cost.usd } : {}) };
      }), null, 2));
    } else {
      out(historyTable(history, state ?? undefined, pricingModel()));
    }
    return 0;
  } finally {
    runtime.close();
  }
}
