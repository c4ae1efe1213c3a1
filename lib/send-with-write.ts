import { StepwiseError, errorMessage } from './core/errors.ts';
import type { CheckpointStore, QueueWork, RunMessage, RunQueue } from './ports.ts';

/**
 * The message for the version a start, a fork, a retry or a wait's answer writes. Where the store holds
 * the queue (the local file) the write sends it in its own transaction, as a worker's step does: sent
 * after it, a process killed between the two (Ctrl-C, the OOM killer, a crashed `stepwise serve`) left a
 * running run with no message, which only a worker's sweep took up, a minute or more later, while a
 * repeated `stepwise approve` called the wait answered and a repeated retry called the run running.
 * Elsewhere (DynamoDB, with SQS beside it) it is sent after the write, and the sweep re-drives a run
 * whose process died between the two.
 */
export function sendWithWrite(store: Pick<CheckpointStore, 'carriesQueueWork'>, message: RunMessage): { queue?: QueueWork } {
  return store.carriesQueueWork ? { queue: { send: { message } } } : {};
}

/**
 * The write is saved and the send after it failed (a throttled or refused SQS, after the SDK's retries):
 * the run is there with no message until a sweep re-drives it. Said with the run's id, where the SDK's
 * words alone ("Rate exceeded") left a start of a random id not knowing which run it had made, and
 * starting again made a second run for the same goal once the sweep moved the first.
 */
export class MessageNotSentError extends StepwiseError {
  constructor(readonly runId: string, readonly version: number, cause: unknown) {
    super(`run ${runId} is saved at version ${version}, but its message to the workers was not sent (${errorMessage(cause)}): `
      + 'a worker\'s sweep sends it again once the run has stalled', { cause });
  }
}

/** The send after the write, where the write could not carry it (sendWithWrite). */
export async function sendAfterWrite(store: Pick<CheckpointStore, 'carriesQueueWork'>, queue: Pick<RunQueue, 'send'>, message: RunMessage): Promise<void> {
  if (store.carriesQueueWork) return;
  try {
    await queue.send(message);
  } catch (error) {
    throw new MessageNotSentError(message.runId, message.version, error);
  }
}
