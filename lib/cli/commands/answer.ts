import { InvalidInputError } from '../../core/errors.ts';
import { createLogger } from '../../log.ts';
import { systemClock } from '../../ports.ts';
import { CODE_VERSION } from '../../version.ts';
import { answerApproval, describeApprovalOutcome as describe, type AnswerOutcome } from '../../waits/answer.ts';
import { checkEvent, emitEvent } from '../../waits/events.ts';
import { openBackend, workerId, type CliOptions } from '../context.ts';
import { assertQueueTakesRun, queueAgentOf } from '../queue-agent.ts';

export interface AnswerOptions extends CliOptions {
  comment?: string;
  /** The approver answering; default the wait's first approver (whoever can run this owns the store). */
  as?: string;
}

/** `approve|reject <runId>`: answers the run's open approval from the terminal, as the page would. */
export async function answerCommand(decision: 'approve' | 'reject', runId: string | undefined, options: AnswerOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError(`usage: stepwise ${decision} <runId> [--comment text] [--as approver]`);
  const backend = await openBackend(options, ['table', 'queue']);
  try {
    await assertQueueTakesRun(backend, await queueAgentOf(backend, options), runId);
    const outcome = await answerApproval(cliDeps(backend), runId, { decision, ...(options.as ? { by: options.as } : {}), ...(options.comment ? { comment: options.comment } : {}) });
    // Anything but resumed changed nothing, and running it again changes nothing either: exit 2 with the
    // reason on stderr, as for `cancel` of an ended run. A wait already answered or expired exited 1,
    // which says "stepwise failed: run it again", so a script retrying on 1 retried for ever.
    if (outcome.outcome !== 'resumed') throw new InvalidInputError(describe(outcome, decision));
    out(describe(outcome, decision));
    return 0;
  } finally {
    backend.close();
  }
}

export interface EmitOptions extends CliOptions {
  id?: string;
}

/** `emit <type> <key> [json]`: an event, as EventBridge or the API would deliver it. */
export async function emitCommand(args: string[], options: EmitOptions, out: (line: string) => void): Promise<number> {
  const [type, key, json] = args;
  if (!type || !key) throw new InvalidInputError('usage: stepwise emit <type> <key> [json payload] [--id event-id]');
  let payload: unknown = null;
  if (json !== undefined) {
    try {
      payload = JSON.parse(json);
    } catch {
      throw new InvalidInputError(`the payload is not valid JSON: ${json.slice(0, 80)}`);
    }
  }
  const event = checkEvent({ type, key, payload, ...(options.id ? { id: options.id } : {}) });
  // An event may come before any run: it is kept for a wait that begins soon.
  const backend = await openBackend(options, ['table', 'queue'], { create: true });
  try {
    // On AWS, only the runs this queue's agent works: the others' events function resumes theirs.
    const queueAgent = await queueAgentOf(backend, options);
    const result = await emitEvent(
      { ...cliDeps(backend), events: backend.waits.events, waitingFor: (t, k) => backend.store.waitingFor(t, k), ...(queueAgent ? { agents: queueAgent.names } : {}) },
      event,
    );
    out(`event ${result.event.id} (${type}/${key})${result.fresh ? '' : ' seen before'}: ${emitted(result.resumed)}`);
    return 0;
  } finally {
    backend.close();
  }
}

/**
 * What became of each run the event matched, as it was: resumed, or (the emit itself found the deadline
 * passed) moved on with "timed out", or not answered and why. The event is kept all the same.
 */
function emitted(outcomes: AnswerOutcome[]): string {
  if (!outcomes.length) return 'no run was waiting for it; kept for a wait that begins soon';
  const resumed = outcomes.filter((o) => o.outcome === 'resumed').map((o) => o.runId);
  const others = outcomes.filter((o) => o.outcome !== 'resumed').map((o) => {
    switch (o.outcome) {
      case 'expired': return `run ${o.runId}: the wait had expired at ${new Date(o.deadline).toISOString()}; it went on with "timed out", not this event`;
      case 'already-answered': return `run ${o.runId}: the wait was already answered (step ${o.record.step}): nothing changed`;
      case 'not-waiting': return `run ${o.runId}: no longer waiting for it (it is ${o.status}): nothing changed`;
      case 'unknown-run': return `run ${o.runId}: gone: nothing changed`;
      case 'refused': return `run ${o.runId}: refused: ${o.reason}`;
    }
  });
  return [...(resumed.length ? [`resumed ${resumed.join(', ')}`] : []), ...others, ...(resumed.length ? [] : ['kept for a wait that begins soon'])].join('; ');
}

function cliDeps(backend: Awaited<ReturnType<typeof openBackend>>) {
  return { store: backend.store, blobs: backend.blobs, queue: backend.queue, clock: systemClock, workerId: `cli-${workerId()}`, codeVersion: CODE_VERSION, log: createLogger() };
}
