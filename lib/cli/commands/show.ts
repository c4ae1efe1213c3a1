import { InvalidInputError } from '../../core/errors.ts';
import { STEPS_SHOWN } from '../../engine/operate/last-steps.ts';
import { showRun, viewRun, withOutput } from '../../engine/operate/show.ts';
import { shownSteps } from './read.ts';
import { openBackend, type CliOptions } from '../context.ts';
import { lastModelOf } from '../../llm/cost.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { leftOutLine, showHeadText, showStepText } from '../format.ts';

export interface ShowOptions extends CliOptions {
  step?: number;
  json?: boolean;
  full?: boolean;
  /** The last this many steps through --step. */
  last?: number;
  /** Every step, however many. */
  all?: boolean;
}

/**
 * `show <runId> [--step n] [--full] [--json] [--last n | --all]`: the run's state after a step, each step in
 * full; of a long run its last steps, read alone (--json: every step unless --last).
 */
export async function showCommand(runId: string | undefined, options: ShowOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise show <runId> [--step n] [--full] [--json]');
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    const step = { ...(options.step !== undefined ? { step: options.step } : {}), ...shownSteps(options, STEPS_SHOWN) };
    if (options.json) {
      out(JSON.stringify(await showRun(runtime, runId, { ...step, ...(options.full ? { full: true } : {}), pricingModel: pricingModel() }), null, 2));
      return 0;
    }
    // As text, each step's whole output is read just before it is printed: a long run's outputs never
    // need to be in memory together.
    const { view, at } = await viewRun(runtime, runId, { ...step, pricingModel: pricingModel() });
    const shown = { full: options.full === true, backend: runtime.kind };
    // Usage no record names a model for is priced by the run's last model, as --json and GET /runs/:id price it.
    const pricing = lastModelOf(at) ?? pricingModel();
    out(showHeadText(view, pricing, { ...shown, at }));
    if (view.stepsFrom) out(`\n${leftOutLine(`steps 1-${view.stepsFrom}`)}`);
    for (const record of view.steps) out(showStepText(options.full ? await withOutput(runtime.blobs, record) : record, pricing, shown));
    return 0;
  } finally {
    runtime.close();
  }
}
