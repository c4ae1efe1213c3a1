import { InvalidInputError } from '../../core/errors.ts';
import { cancelRun } from '../../engine/operate/cancel.ts';
import { openBackend, operateDeps, operator, type CliOptions } from '../context.ts';
import { assertQueueTakesRun, queueAgentOf } from '../queue-agent.ts';

export interface CancelOptions extends CliOptions {
  /** Who cancels (default: user@host). */
  as?: string;
  reason?: string;
}

/** `cancel <runId> [--reason text] [--as who]`: the run stops at its next step boundary, for good. */
export async function cancelCommand(runId: string | undefined, options: CancelOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise cancel <runId> [--reason <text>] [--as <who>]');
  const runtime = await openBackend(options, ['table', 'queue']);
  try {
    await assertQueueTakesRun(runtime, await queueAgentOf(runtime, options), runId);
    const outcome = await cancelRun(operateDeps(runtime), runId, { by: options.as ?? operator(), ...(options.reason !== undefined ? { reason: options.reason } : {}) });
    switch (outcome.outcome) {
      case 'cancelled': out(`run ${runId} cancelled at version ${outcome.version}: ${'idle' in outcome ? 'no worker was working it, so nothing was running' : 'it was waiting, so nothing was running'}${outcome.earlier ? `; by the cancel already requested (${outcome.request}), not this one` : ''}`); break;
      // Said outright: with no worker running, the run stays "running" until one takes its next message.
      // Another's request stands: this one's --as and --reason are not kept, and it says so.
      case 'requested': out(outcome.earlier
        ? `a cancel was already requested for run ${runId} (${outcome.request}): that request stands; it stops at its next step boundary, when a worker takes its next message (sent again, should it have been lost)`
        : `cancel requested for run ${runId}: it stops at its next step boundary (a step running now finishes first), when a worker takes its next message; ${outcome.request}`); break;
      case 'already-cancelled': out(`run ${runId} is already cancelled: nothing changed`); break;
    }
    return 0;
  } finally {
    runtime.close();
  }
}
