import { InvalidInputError } from '../../core/errors.ts';
import { showRun } from '../../engine/operate/show.ts';
import { openBackend, type CliOptions } from '../context.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { showText } from '../format.ts';

export interface ShowOptions extends CliOptions {
  step?: number;
  json?: boolean;
  full?: boolean;
}

/** `show <runId> [--step n] [--full] [--json]`: the run's state after a step, every step in full. */
export async function showCommand(runId: string | undefined, options: ShowOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise show <runId> [--step n] [--full] [--json]');
  const runtime = await openBackend(options);
  try {
    const view = await showRun(runtime, runId, {
      ...(options.step !== undefined ? { step: options.step } : {}), ...(options.full ? { full: true } : {}), pricingModel: pricingModel(),
    });
    out(options.json ? JSON.stringify(view, null, 2) : showText(view, pricingModel(), { full: options.full === true }));
    return 0;
  } finally {
    runtime.close();
  }
}
