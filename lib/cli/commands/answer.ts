import { randomUUID } from 'node:crypto';
import { decodeState } from '../../core/codec.ts';
import { InvalidInputError, UnknownRunError } from '../../core/errors.ts';
import { createLogger } from '../../log.ts';
import { systemClock } from '../../ports.ts';
import { CODE_VERSION } from '../../version.ts';
import { answerWait, type AnswerOutcome } from '../../waits/answer.ts';
import { emitEvent, eventInputSchema } from '../../waits/events.ts';
import { openBackend, workerId, type CliOptions } from '../context.ts';

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
    const stored = await backend.store.load(runId);
    if (!stored) throw new UnknownRunError(runId);
    const wait = decodeState(stored).wait;
    if (stored.status !== 'waiting' || !wait) throw new InvalidInputError(`run ${runId} is not waiting (it is ${stored.status})`);
    if (wait.kind !== 'approval') throw new InvalidInputError(`run ${runId} waits for ${wait.kind === 'event' ? `event ${wait.event?.type}/${wait.event?.key}` : 'a time'}, not an approval`);
    const by = options.as ?? wait.approvers?.[0] ?? '';
    const outcome = await answerWait(cliDeps(backend), {
      runId, waitId: wait.id,
      answer: { kind: decision === 'approve' ? 'approved' : 'rejected', by, ...(options.comment ? { comment: options.comment } : {}) },
    });
    out(describe(outcome, decision));
    return outcome.outcome === 'resumed' ? 0 : 1;
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
  // The API's rules: a type or key no wait can name would be kept a day and match nothing.
  const parsed = eventInputSchema.safeParse({ type, key, payload, id: options.id ?? randomUUID() });
  if (!parsed.success) throw new InvalidInputError(`invalid event: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const event = { ...parsed.data, id: parsed.data.id! };
  const backend = await openBackend(options, ['table', 'queue']);
  try {
    const result = await emitEvent(
      { ...cliDeps(backend), events: backend.waits.events, waitingFor: (t, k) => backend.store.waitingFor(t, k) },
      event,
    );
    const resumed = result.resumed.filter((r) => r.outcome === 'resumed').map((r) => r.runId);
    out(`event ${result.event.id} (${type}/${key})${result.fresh ? '' : ' seen before'}: ${resumed.length ? `resumed ${resumed.join(', ')}` : 'no run was waiting for it; kept for a wait that begins soon'}`);
    return 0;
  } finally {
    backend.close();
  }
}

function cliDeps(backend: Awaited<ReturnType<typeof openBackend>>) {
  return { store: backend.store, blobs: backend.blobs, queue: backend.queue, clock: systemClock, workerId: `cli-${workerId()}`, codeVersion: CODE_VERSION, log: createLogger() };
}

function describe(outcome: AnswerOutcome, decision: string): string {
  switch (outcome.outcome) {
    case 'resumed': return `run ${outcome.runId}: ${decision === 'approve' ? 'approved' : 'rejected'}; it continues at version ${outcome.version}`;
    case 'already-answered': return `run ${outcome.runId}: this approval was already answered (step ${outcome.record.step}): nothing changed`;
    case 'expired': return `run ${outcome.runId}: the approval expired at ${new Date(outcome.deadline).toISOString()}; the run continues with "timed out"`;
    case 'not-waiting': return `run ${outcome.runId} is not waiting for this approval (it is ${outcome.status})`;
    case 'unknown-run': return `unknown run: ${outcome.runId}`;
    case 'refused': return `refused: ${outcome.reason}`;
  }
}
