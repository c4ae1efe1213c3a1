import { InvalidInputError } from '../../core/errors.ts';
import type { Budget } from '../../core/state.ts';
import { retryRun } from '../../engine/operate/retry.ts';
import { openBackend, operateDeps, type CliOptions } from '../context.ts';
import { assertQueueTakesRun, queueAgentOf } from '../queue-agent.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { budgetText } from '../format.ts';

export interface RetryOptions extends CliOptions {
  stepCap?: number;
  budget?: Budget;
}

/** `retry <runId> [--step-cap n] [--budget-tokens n] [--budget-usd x]`: a failed, capped or over-budget run continues. */
export async function retryCommand(runId: string | undefined, options: RetryOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise retry <runId> [--step-cap <n>] [--budget-tokens <n>] [--budget-usd <x>]');
  const runtime = await openBackend(options, ['table', 'queue']);
  try {
    await assertQueueTakesRun(runtime, await queueAgentOf(runtime, options), runId);
    const retried = await retryRun(operateDeps(runtime), runId, {
      ...(options.stepCap !== undefined ? { stepCap: options.stepCap } : {}), ...(options.budget ? { budget: options.budget } : {}),
      pricingModel: pricingModel(),
    });
    out(`retried run ${runId} (it was ${retried.from}): running at version ${retried.version}, step cap ${retried.stepCap}${retried.budget ? `, budget ${budgetText(retried.budget)}` : ''}`);
    return 0;
  } finally {
    runtime.close();
  }
}
