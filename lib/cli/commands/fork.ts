import { InvalidInputError } from '../../core/errors.ts';
import type { Budget } from '../../core/state.ts';
import { forkRun } from '../../engine/operate/fork.ts';
import { agentFlag, openBackend, operateDeps, storeFlags, type CliOptions } from '../context.ts';
import { assertQueueTakesRun, queueAgentOf } from '../queue-agent.ts';
import { defaultModelId as pricingModel } from '../../llm/model-id.ts';
import { sendAgainWith } from '../message-not-sent.ts';

export interface ForkOptions extends CliOptions {
  fromStep?: number;
  runId?: string;
  goal?: string;
  stepCap?: number;
  budget?: Budget;
}

/** `fork <runId> --from-step n [--run-id id] [--goal text]`: a new run from the state after step n. */
export async function forkCommand(parentId: string | undefined, options: ForkOptions, out: (line: string) => void): Promise<number> {
  if (!parentId || options.fromStep === undefined) throw new InvalidInputError('usage: stepwise fork <runId> --from-step <n> [--run-id <id>] [--goal <text>]');
  const runtime = await openBackend(options, ['table', 'queue']);
  try {
    await assertQueueTakesRun(runtime, await queueAgentOf(runtime, options), parentId);
    const forked = await forkRun(operateDeps(runtime), parentId, {
      fromStep: options.fromStep,
      ...(options.runId ? { runId: options.runId } : {}), ...(options.goal !== undefined ? { goal: options.goal } : {}),
      ...(options.stepCap !== undefined ? { stepCap: options.stepCap } : {}), ...(options.budget ? { budget: options.budget } : {}),
      pricingModel: pricingModel(),
    }).catch(sendAgainWith('fork'));
    const from = `${forked.forkedFrom.runId} at step ${forked.forkedFrom.step}`;
    // `run` works a run in its own process on the local backend only; on AWS the fork is the workers'.
    const worksIt = runtime.kind === 'local'
      ? `\`stepwise run${agentFlag(options)}${storeFlags(options)} --run-id ${forked.runId}\` or a worker works it`
      : `\`stepwise worker${agentFlag(options)}${storeFlags(options)}\` works it`;
    out(forked.created
      ? `forked run ${forked.runId} from ${from} (version ${forked.forkedFrom.version}); ${worksIt}`
      : `run ${forked.runId} already exists, forked from ${from}: nothing changed${forked.unapplied ? ` (its ${forked.unapplied.join(' and ')} ${forked.unapplied.length > 1 ? 'are' : 'is'} not the one given: --run-id with another id makes another fork)` : ''}`);
    // A person's approval of the parent's step, copied: the fork's model reads it as its own.
    if (forked.approvals) {
      const list = forked.approvals.map((a) => `step ${a.step} (${a.tool}, by ${a.by})`).join(', ');
      out(`  its copied steps hold ${forked.approvals.length === 1 ? 'an approval' : 'approvals'}: ${list}; its model reads ${forked.approvals.length === 1 ? 'it' : 'them'} as given to it (a tool with approval asks again); fork from an earlier step to ask anew`);
    }
    return 0;
  } finally {
    runtime.close();
  }
}
