import type { Context } from 'hono';
import type { HttpDeps } from './deps.ts';
import { RefusalLog, type RefusalReason } from './refusal-log.ts';

/**
 * What a route calls when a request does not authenticate: it is logged (refusal-log.ts) and counted by the
 * throttle when there is one (auth-throttle.ts, `stepwise serve`'s). The seconds for Retry-After when the
 * throttle holds the address, and the route answers 429; else undefined, and it answers its own refusal.
 */
export type RefuseAuth = (c: Context, reason: RefusalReason, fields?: { runId?: string }) => number | undefined;

export function authRefusals(deps: HttpDeps): RefuseAuth {
  const log = new RefusalLog(deps.log, deps.clock);
  deps.stopping?.addEventListener('abort', () => log.close(), { once: true });
  return (c, reason, fields = {}) => {
    const address = clientAddress(c);
    // A link that expired was issued by this deployment to a person: not a guess, so not held back.
    const retryAfter = reason === 'expired' ? undefined : deps.authThrottle?.refused(address);
    log.refused({ address, method: c.req.method, route: loggedPath(c.req.path), reason, ...(retryAfter !== undefined ? { throttled: true } : {}), ...fields });
    return retryAfter;
  };
}

/**
 * The address the request came from: the socket's peer under `stepwise serve` (a proxy in front is that
 * peer; X-Forwarded-For is not read, as any client may send one), the source IP API Gateway saw behind it.
 */
export function clientAddress(c: Context): string | undefined {
  const env = c.env as {
    incoming?: { socket?: { remoteAddress?: string } };
    requestContext?: { http?: { sourceIp?: string }; identity?: { sourceIp?: string } };
  } | undefined;
  return env?.incoming?.socket?.remoteAddress ?? env?.requestContext?.http?.sourceIp ?? env?.requestContext?.identity?.sourceIp;
}

/** A path as logged: an approval link's token is its credential. */
export const loggedPath = (path: string): string => path.replace(/\/approvals\/[^/]+/, '/approvals/<token>');
