import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import {
  EffectStillRunningError, NewerFormatError, RunIdInUseError, RunIdTakenError, RunStateError, StaleVersionError, StepwiseError, UnknownRunError, UnreadableCheckpointError, errorMessage, isPermanent, movedOnText,
} from '../core/errors.ts';
import { isBusy, lockedDatabaseHint } from '../local/busy.ts';
import { isDiskFull } from '../local/disk-full.ts';
import { NewerLayoutError } from '../local/newer-layout.ts';
import { MessageNotSentError } from '../send-with-write.ts';
import { apiRoutes } from './api-routes.ts';
import { approvalRoutes } from './approval-routes.ts';
import { authRefusals, loggedPath } from './auth-refusal.ts';
import { inspectorRoutes } from './inspector-routes.ts';
import type { HttpDeps } from './deps.ts';
import { messagePage } from './pages.ts';

export { MAX_BODY_BYTES } from './body-limit.ts';

/**
 * The one HTTP app behind `stepwise serve` (Node) and the API Gateway handler (functions/api.ts), so
 * every route and page is tested once. Approval pages under /approvals (their token is the credential),
 * the JSON API at the root (a bearer token locally, IAM on AWS).
 */
export function createHttpApp(deps: HttpDeps): Hono {
  const app = new Hono();
  // Each group of routes limits the bodies it reads after its own authorization (body-limit.ts).
  app.get('/health', (c) => c.json({ ok: true, agent: deps.agent.name }));
  const refuse = authRefusals(deps);
  app.route('/approvals', approvalRoutes(deps, refuse));
  app.route('/inspect', inspectorRoutes(deps, refuse));
  app.route('/', apiRoutes(deps, refuse));
  // A path the app has, asked with another method (PUT /runs, DELETE /runs/:id), is a 405 that names the
  // methods it takes, where a 404 "no route" told a client the run or the route was not there.
  let allowed: ((path: string) => string[]) | undefined;
  app.notFound((c) => {
    allowed ??= allowedMethods(app);
    const methods = allowed(c.req.path);
    if (!methods.length) return c.json({ error: `no route ${c.req.method} ${c.req.path}` }, 404);
    c.header('Allow', methods.join(', '));
    if (c.req.method === 'OPTIONS') return c.body(null, 204);
    return c.json({ error: `${c.req.path} takes ${methods.join(', ')}, not ${c.req.method}` }, 405);
  });
  app.onError((error, c) => {
    // The client went away while its body was read (a streamed upload cut off: its own timeout, Ctrl-C):
    // nobody reads this answer, and nothing failed here. It was an error line "request failed" ("aborted")
    // and a 500, for what any client or scanner may do. 499, as the long poll of GET /runs/:id answers.
    if (clientGone(error, c.req.raw.signal)) return new Response(null, { status: 499 });
    // The approval pages and the inspector are a person's browser: each refusal is a page there, where an
    // approver who pressed Approve as SQS refused the run's message read raw JSON with a 503.
    const answer = <S extends 400 | 404 | 409 | 500 | 503 | 507>(status: S, title: string, body: { error: string } & Record<string, unknown>) =>
      (isPagePath(c.req.path) ? c.html(messagePage(title, body.error), status) : c.json(body, status));
    if (error instanceof UnknownRunError) return answer(404, 'Unknown run', { error: error.message });
    // Written by newer code: nothing was changed, and the answer says what a server needs to read it.
    if (error instanceof NewerFormatError) return answer(409, 'Newer code needed', { error: error.message, needs: error.needs });
    // A start with another agent's run id conflicts with that run, as one with another goal does: nothing changed.
    if (error instanceof RunIdTakenError) return answer(409, 'Run id taken', { error: error.message, runId: error.runId, agent: error.runAgent });
    // A fork under the id of another run: a conflict with that run, as a start's is, not a malformed request.
    if (error instanceof RunIdInUseError) return answer(409, 'Run id taken', { error: error.message, runId: error.runId });
    // The file was brought to a newer layout under this server (a newer release's worker started): this
    // code writes nothing more to it. Said as that, where it read as a bad request (400).
    if (error instanceof NewerLayoutError) return answer(409, 'Newer code needed', { error: error.message });
    // A delete refused while an effect of the run still runs: a conflict that ends by itself, so said
    // with when to ask again, as a locked database is.
    if (error instanceof EffectStillRunningError) {
      c.header('Retry-After', String(Math.ceil(error.retryAfterMs / 1000)));
      return answer(409, 'Not done', { error: error.message, runId: error.runId, status: error.status, key: error.key, retryAfterMs: error.retryAfterMs });
    }
    // A retry or cancel the run's status refuses: a conflict with the run's state, not a malformed request.
    if (error instanceof RunStateError) return answer(409, 'Not done', { error: error.message, runId: error.runId, status: error.status });
    // The run moved on under the request at every try: a conflict with the run as it is now, where it was a 500.
    if (error instanceof StaleVersionError) return answer(409, 'The run moved on', { error: movedOnText(error), runId: error.runId });
    // A checkpoint no code can read is the store's fault, not the request's: a 500 that says which, as the
    // inspector's page does, where it was a 400 telling the caller to fix what it sent.
    const unreadable = error instanceof UnreadableCheckpointError ? error : error instanceof StepwiseError && error.cause instanceof UnreadableCheckpointError ? error.cause : undefined;
    if (unreadable) {
      deps.log.error({ event: 'unreadable-checkpoint', method: c.req.method, path: loggedPath(c.req.path), runId: unreadable.runId, version: unreadable.version, error: unreadable.message }, 'request refused: a checkpoint cannot be read');
      const message = error === unreadable ? `${unreadable.message}; nothing was changed` : error.message;
      return answer(500, 'Unreadable checkpoint', { error: message, runId: unreadable.runId, version: unreadable.version });
    }
    // Bad input from the caller (a goal too long, a bad run id): its message says what to fix.
    if (error instanceof StepwiseError && isPermanent(error)) return answer(400, 'Not done', { error: error.message });
    // Hono's own refusals (a body that is not JSON, a wrong content type) carry their status.
    if (error instanceof HTTPException) return c.json({ error: error.message }, error.status);
    // The SQLite file locked past the busy timeout (a process frozen in its commit): no fault of the
    // server's, and gone once that process goes on. Said so, with when to ask again, where it was a 500
    // "internal error" (an approver's press of Approve too, as JSON).
    if (isBusy(error)) {
      deps.log.warn({ event: 'database-locked', method: c.req.method, path: loggedPath(c.req.path) }, 'request refused: the database is locked');
      c.header('Retry-After', String(LOCKED_RETRY_AFTER_S));
      if (isPagePath(c.req.path)) return c.html(messagePage('Busy', 'The database is locked by another process, so nothing was changed: try again in a few seconds.'), 503);
      return c.json({ error: `the database is locked: ${lockedDatabaseHint('it')}` }, 503);
    }
    // The disk that holds the SQLite file is full: a write rolled back whole, which the operator mends by
    // freeing space, where it was a 500 "internal error" to the caller (an approver's Approve too) and a
    // bare 'database or disk is full' in the log.
    if (isDiskFull(error)) {
      deps.log.error({ event: 'disk-full', method: c.req.method, path: loggedPath(c.req.path), error: errorMessage(error) }, 'request refused: the disk that holds the database is full; free space on it');
      return answer(507, 'Disk full', { error: 'the disk that holds the database is full, so nothing was changed: try again once space is freed on it' });
    }
    // The run was saved and its message not sent (SQS throttled past the SDK's retries): said with the run,
    // where a 500 "changed nothing" hid that a start without a runId had made one. A sweep moves it once it
    // has stalled, and the same start with this runId sends the message now.
    if (error instanceof MessageNotSentError) {
      deps.log.error({ event: 'message-not-sent', method: c.req.method, path: loggedPath(c.req.path), runId: error.runId, version: error.version, error: errorMessage(error.cause) }, error.message);
      return answer(503, 'Saved, not yet sent', { error: error.message, runId: error.runId, version: error.version });
    }
    deps.log.error({ event: 'http-error', method: c.req.method, path: loggedPath(c.req.path), error: errorMessage(error) }, 'request failed');
    return answer(500, 'Not done', { error: 'internal error; the request changed nothing it did not finish' });
  });
  return app;
}

/**
 * The methods each path of the app takes (HEAD wherever GET, as Hono answers it), read from its routes once
 * they are all in place: a route added later is in the Allow header with no list kept beside it.
 */
function allowedMethods(app: Hono): (path: string) => string[] {
  const segment = (part: string) => (part.startsWith(':') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const routes = app.routes
    .filter((r) => r.method !== 'ALL' && !r.path.includes('*'))
    .map((r) => ({ method: r.method, pattern: new RegExp(`^${r.path.split('/').map(segment).join('/')}$`) }));
  return (path) => {
    const methods = new Set(routes.filter((r) => r.pattern.test(path)).map((r) => r.method));
    if (!methods.size) return [];
    if (methods.has('GET')) methods.add('HEAD');
    return [...methods, 'OPTIONS'].sort();
  };
}

/** Seconds a client is told to wait before asking again when the database is locked. */
const LOCKED_RETRY_AFTER_S = 5;

/**
 * The request's own connection reset under it: its signal is aborted (the client is gone) and the error is
 * the reset of the body being read, not something the app's own calls threw meanwhile.
 */
const clientGone = (error: Error, signal: AbortSignal): boolean =>
  signal.aborted && (error as NodeJS.ErrnoException).code === 'ECONNRESET';

/** The approval pages and the inspector answer with pages, the API with JSON. */
const isPagePath = (path: string): boolean => /^\/(approvals|inspect)(\/|$)/.test(path);
