import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import { NewerFormatError, StepwiseError, UnknownRunError, errorMessage, isPermanent } from '../core/errors.ts';
import { apiRoutes } from './api-routes.ts';
import { approvalRoutes } from './approval-routes.ts';
import { inspectorRoutes } from './inspector-routes.ts';
import type { HttpDeps } from './deps.ts';

/** The largest request body read: an event's payload may be 256 KiB, with room for its JSON around it. */
export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * The one HTTP app behind `stepwise serve` (Node) and the API Gateway handler (functions/api.ts), so
 * every route and page is tested once. Approval pages under /approvals (their token is the credential),
 * the JSON API at the root (a bearer token locally, IAM on AWS).
 */
export function createHttpApp(deps: HttpDeps): Hono {
  const app = new Hono();
  // Read no further than any request needs: the largest is an event (MAX_EVENT_BYTES of payload).
  app.use('*', bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: (c) => {
      // The rest of the body is left unread, and Node closes such a connection after the answer: say so,
      // or the client keeps it alive and its next request on it fails ("other side closed").
      c.header('Connection', 'close');
      return c.json({ error: `the request body is over ${MAX_BODY_BYTES} bytes, the most any request takes` }, 413);
    },
  }));
  app.get('/health', (c) => c.json({ ok: true, agent: deps.agent.name }));
  app.route('/approvals', approvalRoutes(deps));
  app.route('/inspect', inspectorRoutes(deps));
  app.route('/', apiRoutes(deps));
  app.notFound((c) => c.json({ error: `no route ${c.req.method} ${c.req.path}` }, 404));
  app.onError((error, c) => {
    if (error instanceof UnknownRunError) return c.json({ error: error.message }, 404);
    // Written by newer code: nothing was changed, and the answer says what a server needs to read it.
    if (error instanceof NewerFormatError) return c.json({ error: error.message, needs: error.needs }, 409);
    // Bad input from the caller (a goal too long, a bad run id): its message says what to fix.
    if (error instanceof StepwiseError && isPermanent(error)) return c.json({ error: error.message }, 400);
    // Hono's own refusals (a body that is not JSON, a wrong content type) carry their status.
    if (error instanceof HTTPException) return c.json({ error: error.message }, error.status);
    deps.log.error({ event: 'http-error', method: c.req.method, path: c.req.path.replace(/\/approvals\/[^/]+/, '/approvals/<token>'), error: errorMessage(error) }, 'request failed');
    return c.json({ error: 'internal error; the request changed nothing it did not finish' }, 500);
  });
  return app;
}
