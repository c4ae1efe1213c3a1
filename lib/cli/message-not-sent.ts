import { StepwiseError } from '../core/errors.ts';
import { MessageNotSentError } from '../send-with-write.ts';

/**
 * A start or fork whose run was saved but whose first message was not sent: the same command again with
 * --run-id of that run sends it now (a repeated start or fork re-drives a running run and makes no other),
 * where the same command without it made a second run for the same goal. Any other error passes as it is.
 */
export function sendAgainWith(command: 'start' | 'fork'): (error: unknown) => never {
  return (error) => {
    if (!(error instanceof MessageNotSentError)) throw error;
    throw new StepwiseError(`${error.message}; or run this ${command} again with --run-id ${error.runId}, which sends it now and makes no other run`, { cause: error });
  };
}
