import { InvalidInputError } from '../../core/errors.ts';
import { showRun, withOutput } from '../../engine/operate/show.ts';
import { openBackend, type CliOptions } from '../context.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { showHeadText, showStepText } from '../format.ts';

export interface ShowOptions extends CliOptions {
  step?: number;
  json?: boolean;
  full?: boolean;
}

/** `show <runId> [--step n] [--full] [--json]`: the run's state after a step, every step in full. */
export async function showCommand(runId: string | undefined, options: ShowOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise show <runId> [--step n] [--full] [--json]');
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    const step = options.step !== undefined ? { step: options.step } : {};
    if (options.json) {
      out(JSON.stringify(await showRun(runtime, runId, { ...step, ...(options.full ? { full: true } : {}), pricingModel: pricingModel() }), null, 2));
      return 0;
    }
    // As text, each step's whole output is read just before it is printed: a long run's outputs never
    // need to be in memory together.
    const view = await showRun(runtime, runId, { ...step, pricingModel: pricingModel() });
    const shown = { full: options.full === true, backend: runtime.kind };
    out(showHeadText(view, pricingModel(), shown));
    for (const record of view.steps) out(showStepText(options.full ? await withOutput(runtime.blobs, record) : record, pricingModel(), shown));
    return 0;
  } finally {
    runtime.close();
  }
}
