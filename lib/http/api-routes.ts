import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { zValidator } from '@hono/zod-validator';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import * as z from 'zod';
import { agentNames } from '../agent.ts';
import { unheldBlocksPriced } from '../llm/cost.ts';
import { NoSuchStepError } from '../core/errors.ts';
import { RUN_STATUSES, budgetSchema, isTerminal, type RunState } from '../core/state.ts';
import { cancelRun } from '../engine/operate/cancel.ts';
import { deleteRun } from '../engine/operate/delete.ts';
import { forkRun } from '../engine/operate/fork.ts';
import { retryRun } from '../engine/operate/retry.ts';
import { costView, showRun } from '../engine/operate/show.ts';
import { startRun } from '../engine/start.ts';
import { answerWait, describeApprovalOutcome, type AnswerOutcome } from '../waits/answer.ts';
import { emitEvent, eventInputSchema } from '../waits/events.ts';
import type { HttpDeps } from './deps.ts';
import { historyPage } from '../engine/operate/history.ts';
import { loadAsResumed } from '../engine/operate/load.ts';
import { listRunsPage, listWaitsPage } from '../engine/operate/list.ts';
import { otherAgentsRun } from './other-agent.ts';
import { pricingModelFor } from './pricing-model.ts';
import { MAX_PAGE, pageQuery } from './page-query.ts';
import { bearerToken, tokensMatch } from './bearer.ts';
import { clientAddress, type RefuseAuth } from './auth-refusal.ts';
import { LONG_POLL_RETRY_AFTER_S } from './long-polls.ts';
import { RefusalLog } from './refusal-log.ts';
import { limitBody } from './body-limit.ts';

const budgetBody = budgetSchema.strict();

const startBody = z.object({
  goal: z.string(),
  runId: z.string().optional(),
  stepCap: z.number().int().positive().optional(),
  budget: budgetBody.optional(),
}).strict();

const forkBody = z.object({
  fromStep: z.number().int().nonnegative(),
  runId: z.string().optional(),
  goal: z.string().optional(),
  stepCap: z.number().int().positive().optional(),
  budget: budgetBody.optional(),
}).strict();

const retryBody = z.object({
  stepCap: z.number().int().positive().optional(),
  budget: budgetBody.optional(),
}).strict();

const cancelBody = z.object({
  by: z.string().min(1).max(254),
  reason: z.string().max(1000).optional(),
}).strict();

const stepQuery = z.object({ full: z.enum(['true', 'false']).optional() }).strict();

/** The longest a GET /runs/:id waits for a newer version: under API Gateway's 29 s, the API function's timeout. */
export const MAX_RUN_WAIT_SECONDS = 20;
/** How often a waiting GET /runs/:id reads the run's head (one row, or one GetItem, each). */
const RUN_WAIT_POLL_MS = 250;
const digitsFrom = (least: number, most: number) => z.string().refine((v) => /^\d{1,9}$/.test(v) && Number(v) >= least && Number(v) <= most, {
  error: (issue) => `a whole number from ${least} to ${most}, got ${JSON.stringify(issue.input)}`,
}).transform(Number);
/**
 * `after` (a version) with `waitSeconds`: the answer waits until the run has a newer version than that, or
 * the seconds pass, so a program follows a run without polling it in a loop of its own (as `stepwise watch`
 * does).
 */
const runQuery = z.object({ after: digitsFrom(0, Number.MAX_SAFE_INTEGER).optional(), waitSeconds: digitsFrom(1, MAX_RUN_WAIT_SECONDS).optional() }).strict()
  .refine((q) => (q.after === undefined) === (q.waitSeconds === undefined), { error: 'after and waitSeconds go together: the version to wait past, and for how long' });

const answerBody = z.object({
  decision: z.enum(['approve', 'reject']),
  by: z.string().min(3).max(254),
  comment: z.string().max(4000).optional(),
}).strict();

const listQuery = pageQuery.extend({ status: z.enum(RUN_STATUSES).optional() }).strict();

const waitsQuery = pageQuery.strict();

/**
 * A zod failure as a 400 that says which field and why ("required" where zod says "received undefined").
 * An unknown field or query parameter is named as such: a misspelt one
 * (`?staus=waiting`) was ignored, and the answer, every run, looked like what was asked for.
 */
const invalid = (
  result: { success: boolean; target?: string; error?: { issues: readonly { path: readonly PropertyKey[]; message: string; code?: string; keys?: readonly string[] }[] } },
  c: Context,
) => {
  if (result.success || !result.error) return undefined;
  const where = result.target === 'query' ? '(query)' : '(body)';
  const issues = result.error.issues.map((i) => {
    if (i.code === 'unrecognized_keys' && i.keys?.length) {
      const what = result.target === 'query' ? 'query parameter' : 'field';
      return `${i.path.map(String).join('.') || where}: unknown ${what}${i.keys.length > 1 ? 's' : ''} ${i.keys.map((k) => JSON.stringify(k)).join(', ')}`;
    }
    return `${i.path.map(String).join('.') || where}: ${i.message.replace(/^Invalid input: expected (\w+), received undefined$/, 'required ($1)')}`;
  });
  return c.json({ error: `invalid request: ${issues.join('; ')}`, issues }, 400);
};

/**
 * The Location of a run a POST created, relative to the URL posted to (`runs/<id>` from /runs, `../<id>`
 * from /runs/<parent>/fork): behind a proxy that serves the app under a path, `/runs/<id>` would point
 * past it, where a relative reference resolves under it.
 */
const createdAt = (up: string, runId: string): string => `${up}${encodeURIComponent(runId)}`;

const ANSWER_STATUS: Record<AnswerOutcome['outcome'], 200 | 403 | 404 | 409 | 410> = {
  resumed: 200, 'already-answered': 409, expired: 410, 'not-waiting': 409, 'unknown-run': 404, refused: 403,
};

const LONG_POLL_LINE = {
  event: 'long-poll-refused', one: 'long poll refused: its address holds its cap of them', many: (n: number) => `${n} long polls refused: their address holds its cap of them`,
};

/** The JSON API for programs: start runs, read them, see and answer waits, send events. */
export function apiRoutes(deps: HttpDeps, refuse: RefuseAuth): Hono {
  const app = new Hono();
  if (deps.apiToken) app.use('*', bearer(deps.apiToken, refuse));
  app.use('*', limitBody);
  app.use('*', jsonBodies);
  // On AWS, another agent's run is not this API's to answer, retry, cancel, fork or delete (other-agent.ts).
  if (deps.agentQueue) {
    app.use('/runs/:runId/*', async (c, next) => {
      if (c.req.method !== 'POST' && c.req.method !== 'DELETE') return next();
      const refused = await otherAgentsRun(deps, c.req.param('runId'));
      return refused ? c.json({ error: refused }, 409) : next();
    });
  }

  app.post('/runs', zValidator('json', startBody, invalid), async (c) => {
    const body = c.req.valid('json');
    // A runId given empty (a client's unset variable) is refused by the run id's rule, as the CLI refuses
    // an empty --run-id: taken for no runId, each retry of the request started a run of its own.
    const started = await startRun(deps, {
      goal: body.goal, ...(body.runId !== undefined ? { runId: body.runId } : {}), ...(body.stepCap ? { stepCap: body.stepCap } : {}), ...(body.budget ? { budget: body.budget } : {}),
    });
    // The same id with another goal or limits is another request under a reused id, not a retry of this
    // one: answered 200, the program took the existing run for the one it asked for.
    if (started.unapplied) {
      return c.json({
        error: `run ${started.runId} already exists with another ${started.unapplied.join(' and ')}: nothing changed, since a start sets them only on a new run; `
          + `POST /runs/${started.runId}/fork starts from its steps with another goal or limits, or use another runId`,
        ...started,
      }, 409);
    }
    if (started.created) c.header('Location', createdAt('runs/', started.runId));
    return c.json(started, started.created ? 201 : 200);
  });

  app.get('/runs', zValidator('query', listQuery, invalid), async (c) => {
    const query = c.req.valid('query');
    return c.json(await listRunsPage(deps.store, { ...(query.status ? { status: query.status } : {}), limit: query.limit ?? 100, ...(query.cursor ? { cursor: query.cursor } : {}) }));
  });

  const longPollRefusals = deps.longPolls ? new RefusalLog<'long-polls-per-address'>(deps.log, deps.clock, { line: LONG_POLL_LINE }) : undefined;
  if (longPollRefusals) deps.stopping?.addEventListener('abort', () => longPollRefusals.close(), { once: true });

  app.get('/runs/:runId', zValidator('query', runQuery, invalid), async (c) => {
    const runId = c.req.param('runId');
    const { after, waitSeconds } = c.req.valid('query');
    if (after !== undefined && waitSeconds !== undefined) {
      const address = clientAddress(c);
      const release = deps.longPolls ? deps.longPolls.take(address) : () => undefined;
      if (!release) {
        longPollRefusals?.refused({ address, method: c.req.method, route: c.req.path, reason: 'long-polls-per-address' });
        c.header('Retry-After', String(LONG_POLL_RETRY_AFTER_S));
        return c.json({ error: `this address holds ${deps.longPolls!.perAddress} waiting GET /runs/:id already, the most it may: ask again once one has answered, or without after and waitSeconds for the run at once` }, 429);
      }
      try {
        const waited = await waitPast(runId, after, waitSeconds, c.req.raw.signal);
        if (waited) return waited;
      } finally {
        release();
      }
    }
    // Read as a resume reads it: its summaries' costs keep the cost exact; one of an older release has none.
    const read = await loadAsResumed(deps.store, runId, (state) => !unheldBlocksPriced(state));
    if (!read) return c.json({ error: `unknown run: ${runId}` }, 404);
    return c.json({ run: runView(read.state, read.stored.version, pricingModelFor(deps), read.stored.cancelRequested) });
  });

  /**
   * Waits until the run has a version past `after`, has ended, the seconds pass or serve is stopping: then
   * undefined, and the run is answered as it stands. An answer instead when there is none to give (404, 499).
   */
  async function waitPast(runId: string, after: number, waitSeconds: number, gone: AbortSignal): Promise<Response | undefined> {
    // The head alone at each look (no step records): the run's version and status, until it moves past `after`.
    const until = performance.now() + waitSeconds * 1000;
    // A client that goes away mid-wait (a timeout of its own, a closed tab) ends the wait (`gone`): the looks
    // went on every 250 ms for the rest of its seconds, for nobody, and after serve had stopped and closed the
    // file, each left an http-error line ("The database connection is not open").
    for (;;) {
      const head = await deps.store.load(runId, { afterStep: Number.MAX_SAFE_INTEGER });
      if (!head) return Response.json({ error: `unknown run: ${runId}` }, { status: 404 });
      // A server stopping answers with the run as it stands, as when the seconds pass: the long poll held
      // serve's stop for its whole grace, then lost its connection with no answer.
      if (head.version > after || isTerminal(head.status) || performance.now() >= until || deps.stopping?.aborted) return undefined;
      await sleep(Math.min(RUN_WAIT_POLL_MS, Math.max(0, until - performance.now())), undefined, { signal: gone }).catch(() => undefined);
      // Nobody reads this answer: 499, nginx's "client closed request", for whatever logs it.
      if (gone.aborted) return new Response(null, { status: 499 });
    }
  }

  app.get('/runs/:runId/history', zValidator('query', pageQuery.strict(), invalid), async (c) => {
    const runId = c.req.param('runId');
    const query = c.req.valid('query');
    // The newest page first: a run of thousands of steps was one answer of megabytes, past what a Lambda
    // may return (6 MB); `next` pages back in time.
    const page = await historyPage(deps.store, runId, { limit: query.limit ?? MAX_PAGE, ...(query.cursor ? { cursor: query.cursor } : {}) });
    if (!page.checkpoints.length && !(await deps.store.load(runId))) return c.json({ error: `unknown run: ${runId}` }, 404);
    return c.json({ runId, ...page });
  });

  // Operating runs (lib/engine/operate): the state after a step, fork, retry, cancel.
  app.get('/runs/:runId/steps/:step', zValidator('query', stepQuery, invalid), async (c) => {
    // Digits only: Number() would also read '0x2', '1e1' and ' 2' as steps.
    const step = /^\d{1,9}$/.test(c.req.param('step')) ? Number(c.req.param('step')) : Number.NaN;
    if (!Number.isInteger(step)) return c.json({ error: `invalid request: step: a whole number from 0, got ${JSON.stringify(c.req.param('step'))}` }, 400);
    const full = c.req.valid('query').full === 'true';
    let view;
    try {
      // The step's record alone, with the block summaries before it: its usage and cost are every step's
      // through it, without reading them.
      view = await showRun(deps, c.req.param('runId'), { step, last: 1, full: full ? [step] : [], pricingModel: pricingModelFor(deps) });
    } catch (error) {
      // The run is there and the step is not: a 404 with the run's own count, where it was a 400 a client
      // could not tell from a malformed path. A fork's fromStep past the run's end stays a 400 (its body).
      if (error instanceof NoSuchStepError) return c.json({ error: error.message, runId: error.runId, step: error.step }, 404);
      throw error;
    }
    const { steps, stepsFrom: _from, ...run } = view;
    const { atStep, usage, cost, ...head } = run;
    return c.json({ run: head, atStep, usage, cost, ...(step > 0 ? { record: steps.at(-1) } : {}) });
  });

  app.post('/runs/:runId/fork', zValidator('json', forkBody, invalid), async (c) => {
    const body = c.req.valid('json');
    const forked = await forkRun(deps, c.req.param('runId'), {
      fromStep: body.fromStep, ...(body.runId !== undefined ? { runId: body.runId } : {}), ...(body.goal !== undefined ? { goal: body.goal } : {}),
      ...(body.stepCap ? { stepCap: body.stepCap } : {}), ...(body.budget ? { budget: body.budget } : {}), pricingModel: pricingModelFor(deps),
    });
    if (forked.unapplied) {
      return c.json({
        error: `run ${forked.runId} already exists, forked from ${forked.forkedFrom.runId} at step ${forked.forkedFrom.step}, with another ${forked.unapplied.join(' and ')}: nothing changed; use another runId for another fork`,
        ...forked,
      }, 409);
    }
    if (forked.created) c.header('Location', createdAt('../', forked.runId));
    return c.json(forked, forked.created ? 201 : 200);
  });

  app.post('/runs/:runId/retry', zValidator('json', retryBody, invalid), async (c) => {
    const body = c.req.valid('json');
    return c.json(await retryRun(deps, c.req.param('runId'), {
      ...(body.stepCap ? { stepCap: body.stepCap } : {}), ...(body.budget ? { budget: body.budget } : {}), pricingModel: pricingModelFor(deps),
    }));
  });

  // A run that has ended, with everything kept for it (lib/engine/operate/delete.ts): 409 while it runs or waits,
  // and 409 with Retry-After while an effect of it still holds its idempotency key (app.ts).
  app.delete('/runs/:runId', async (c) => c.json(await deleteRun(deps, c.req.param('runId'))));

  app.post('/runs/:runId/cancel', zValidator('json', cancelBody, invalid), async (c) => {
    const body = c.req.valid('json');
    return c.json(await cancelRun(deps, c.req.param('runId'), { by: body.by, ...(body.reason !== undefined ? { reason: body.reason } : {}) }));
  });

  app.get('/waits', zValidator('query', waitsQuery, invalid), async (c) => {
    const query = c.req.valid('query');
    // Whose run waits: agents sharing the store list their waits together, and on AWS this API answers only its own.
    return c.json(await listWaitsPage(deps.store, { limit: query.limit ?? 100, ...(query.cursor ? { cursor: query.cursor } : {}) }));
  });

  app.post('/runs/:runId/waits/:waitId', zValidator('json', answerBody, invalid), async (c) => {
    const body = c.req.valid('json');
    const outcome = await answerWait(deps, {
      runId: c.req.param('runId'), waitId: c.req.param('waitId'),
      answer: { kind: body.decision === 'approve' ? 'approved' : 'rejected', by: body.by, ...(body.comment ? { comment: body.comment } : {}) },
    });
    // A refusal says why in `error`, as every other route's does, beside the outcome's fields.
    if (outcome.outcome !== 'resumed') return c.json({ error: describeApprovalOutcome(outcome, body.decision), ...outcome }, ANSWER_STATUS[outcome.outcome]);
    return c.json(outcome, 200);
  });

  app.post('/events', zValidator('json', eventInputSchema, invalid), async (c) => {
    if (!deps.events) return c.json({ error: 'this deployment keeps no events' }, 501);
    const body = c.req.valid('json');
    const result = await emitEvent({
      ...deps, events: deps.events, waitingFor: (type, key) => deps.store.waitingFor(type, key), ...(deps.agentQueue ? { agents: agentNames(deps.agent) } : {}),
    }, { ...body, id: body.id ?? randomUUID() });
    return c.json({ eventId: result.event.id, fresh: result.fresh, resumed: result.resumed.filter((r) => r.outcome === 'resumed').map((r) => r.runId) }, 202);
  });
  return app;
}

/**
 * A run as GET /runs/:id gives it: the head, its estimated cost as `show --json` gives it, and its last
 * step; not the step records (see /history and the inspector). A cancel asked for and not yet applied is
 * kept beside the version: until a worker applies it the run is still running, and a program that
 * cancelled it sees why.
 */
function runView(state: RunState, version: number, pricingModel: string, cancelRequested?: string) {
  const { steps, pending: _pending, stepsFrom: _from, condensed: _condensed, ...head } = state;
  return {
    ...head, version, ...(cancelRequested !== undefined ? { cancelRequested } : {}), cost: costView(state, pricingModel),
    steps: state.step, lastStep: steps[steps.length - 1],
  };
}

/**
 * A body in another type (a form, text) would reach the validators as no body at all, and be refused
 * for its "missing" fields: say what is wrong instead. A POST with no body stays fine (retry, cancel),
 * with or without a JSON Content-Type: an empty JSON body reads as {}, where the parser found it malformed.
 */
const jsonBodies: MiddlewareHandler = async (c, next) => {
  const type = c.req.header('content-type');
  const hasBody = Number(c.req.header('content-length') ?? 0) > 0 || c.req.header('transfer-encoding') !== undefined;
  if (c.req.method !== 'POST') return next();
  const json = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(type ?? '');
  if ((hasBody || type) && !json) {
    return c.json({ error: `send the body as JSON, with Content-Type: application/json (got ${type ? JSON.stringify(type) : 'no Content-Type'})` }, 415);
  }
  // Read ahead only where no header says a body comes (API Gateway may give no Content-Length): the
  // validator reads the body once more.
  if (json && !hasBody && !(await c.req.raw.clone().text()).trim()) c.req.raw = new Request(c.req.raw, { body: '{}' });
  await next();
};

function bearer(token: string, refuse: RefuseAuth): MiddlewareHandler {
  return async (c, next) => {
    const authorization = c.req.header('authorization');
    if (!tokensMatch(bearerToken(authorization), token)) {
      const retryAfter = refuse(c, authorization === undefined ? 'missing' : 'wrong');
      if (retryAfter !== undefined) {
        c.header('Retry-After', String(retryAfter));
        return c.json({ error: `too many requests from this address without the right token: try again in ${retryAfter} s, with Authorization: Bearer <token>` }, 429);
      }
      // The scheme wanted, as a 401 must say (RFC 9110 15.5.2): a client library reads it to know what to send.
      c.header('WWW-Authenticate', 'Bearer');
      return c.json({ error: 'unauthorized: send Authorization: Bearer <token> (stepwise serve says where it is kept)' }, 401);
    }
    await next();
  };
}
