import { randomUUID } from 'node:crypto';

/** What the SDK sends for one attempt of a command: its name and its (marshalled) input. */
export type AttemptMatcher = (commandName: string, input: Record<string, unknown>) => boolean;

/**
 * A fault a server cannot produce on cue: the first attempt of a matching command reaches DynamoDB Local
 * and is applied there, then its answer is lost (a 500, a timeout), so the SDK's own retry sends the same
 * write again. The middleware sits below the SDK's retry step, so it sees every attempt.
 */
export function appliedThenFails(
  client: { middlewareStack: { add(middleware: any, options: any): void } },
  matches: AttemptMatcher,
  error: () => Error,
): { fired: () => number; attempts: () => number } {
  let fired = 0;
  let attempts = 0;
  client.middlewareStack.add(
    (next: (args: { input: Record<string, unknown> }) => Promise<unknown>, context: { commandName?: string }) =>
      async (args: { input: Record<string, unknown> }) => {
        const matching = matches(context.commandName ?? '', args.input);
        if (matching) attempts++;
        const output = await next(args);
        if (matching && fired === 0) {
          fired++;
          throw error();
        }
        return output;
      },
    { step: 'deserialize', priority: 'high', name: `applied-then-fails-${randomUUID()}` },
  );
  return { fired: () => fired, attempts: () => attempts };
}

export const serverError = (): Error => Object.assign(new Error('Internal server error (injected after the write was applied)'), {
  name: 'InternalServerError', $fault: 'server', $metadata: { httpStatusCode: 500 },
});

export const timeout = (): Error => Object.assign(new Error('socket hang up (injected after the write was applied)'), { name: 'TimeoutError' });
