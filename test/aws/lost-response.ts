import { randomUUID } from 'node:crypto';

type Stack = { middlewareStack: { add(middleware: unknown, options: unknown): void } };
type Request = { request?: { headers?: Record<string, string>; body?: unknown } };

export interface LostResponse {
  /** True once a write was let through and its answer replaced by the error. */
  fired(): boolean;
  /** The body of every attempt of the chosen operation, in order (the SDK's retries included). */
  attempts: Record<string, unknown>[];
}

/**
 * The ambiguous write no local server produces on cue: the first `operation` request reaches DynamoDB
 * Local and is applied, then its answer is replaced by a retryable error (a 500, or a timeout), so the
 * SDK's retry sends the same request again. Installed inside the SDK's retry loop, on a real client.
 */
export function loseFirstResponse(client: Stack, operation: 'UpdateItem' | 'TransactWriteItems' | 'PutItem', error: 'server-error' | 'timeout' = 'server-error'): LostResponse {
  let fired = false;
  const attempts: Record<string, unknown>[] = [];
  client.middlewareStack.add(
    (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
      const request = (args as Request).request;
      if (request?.headers?.['x-amz-target'] !== `DynamoDB_20120810.${operation}`) return next(args);
      attempts.push(JSON.parse(String(request.body)) as Record<string, unknown>);
      const answer = await next(args);
      if (fired) return answer;
      fired = true;
      throw error === 'timeout'
        ? Object.assign(new Error('Connection timed out after the request was sent'), { name: 'TimeoutError', $metadata: {} })
        : Object.assign(new Error('We encountered an internal error. Please try again.'), {
          name: 'InternalServerError', $fault: 'server', $metadata: { httpStatusCode: 500 },
        });
    },
    { step: 'finalizeRequest', priority: 'low', name: `lose-response-${randomUUID()}` },
  );
  return { fired: () => fired, attempts };
}
