import { createHmac } from 'node:crypto';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { getCookie, setCookie } from 'hono/cookie';
import * as z from 'zod';
import { decodeRecords, decodeState, type StoredCheckpoint } from '../core/codec.ts';
import { NewerFormatError, StepwiseError, UnreadableCheckpointError, isPermanent } from '../core/errors.ts';
import { dollarsAboveZero, wholeAboveZero } from '../core/limit-text.ts';
import type { Budget, RunState, StepRecord } from '../core/state.ts';
import { unheldBlocksPriced } from '../llm/cost.ts';
import { loadAsResumed } from '../engine/operate/load.ts';
import { RUN_STATUSES, isTerminal } from '../core/statuses.ts';
import { cancelRun } from '../engine/operate/cancel.ts';
import { forkRun } from '../engine/operate/fork.ts';
import { historyPage } from '../engine/operate/history.ts';
import { listRunsPage } from '../engine/operate/list.ts';
import { retryRun } from '../engine/operate/retry.ts';
import { withOutput } from '../engine/operate/show.ts';
import { answerWait } from '../waits/answer.ts';
import type { HttpDeps } from './deps.ts';
import { RUN_PAGE_CHECKPOINTS, runPage, runsPage, stepPage } from './inspector-pages.ts';
import { MAX_PAGE, pageQuery } from './page-query.ts';
import { tokensMatch } from './bearer.ts';
import { otherAgentsRun } from './other-agent.ts';
import { pricingModelFor } from './pricing-model.ts';
import { messagePage, notTakenPage, pageHeaders, type Page } from './pages.ts';
import { readForm } from './read-form.ts';
import { bearerToken } from './bearer.ts';
import type { RefuseAuth } from './auth-refusal.ts';
import { limitBody } from './body-limit.ts';

const COOKIE = 'stepwise_token';
/** The list's query: a page, and the one status it shows (as GET /runs?status=), such as the runs waiting for an answer. */
const listQuery = pageQuery.extend({ status: z.enum(RUN_STATUSES).optional() });
const answerForm = z.object({ decision: z.enum(['approve', 'reject']), comment: z.string().max(4000).optional(), as: z.string().max(320).optional() });

/**
 * The run inspector pages under /inspect. Behind the same authorization as the API: locally the API
 * token, which `/inspect?token=...` turns into an HttpOnly, SameSite=Strict cookie; on AWS, IAM at the
 * gateway, like the program routes. Its forms are taken from its own pages only (sameOriginForms).
 */
export function inspectorRoutes(deps: HttpDeps, refuse: RefuseAuth): Hono {
  const app = new Hono();
  // The pages price as the API and the budget do: they priced by STEPWISE_MODEL alone, so a run of an agent
  // that names its model, ended by a DONE before any step, showed another figure than GET /runs/:id/steps/0.
  const model = () => pricingModelFor(deps);
  // Its links, redirects and cookie as the browser sees the inspector: behind a proxy that serves the app
  // under a path (STEPWISE_PUBLIC_URL https://host/stepwise), every absolute /inspect link went past it.
  const root = `${deps.pathPrefix ?? ''}/inspect`;
  const back = (c: Context, runId: string) => c.redirect(`${root}/runs/${encodeURIComponent(runId)}`, 303);
  app.use('*', pageHeaders());
  app.use('*', sameOriginForms);
  if (deps.apiToken) app.use('*', tokenOrCookie(deps.apiToken, deps.pathPrefix ?? '', refuse));
  app.use('*', limitBody);
  // As the API refuses them (other-agent.ts): on AWS another agent's run is not this inspector's to operate.
  app.use('/runs/:runId/*', async (c, next) => {
    if (c.req.method !== 'POST') return next();
    const refused = await otherAgentsRun(deps, c.req.param('runId'));
    return refused ? c.html(messagePage('Not done', `${refused}. Nothing was changed.`), 409) : next();
  });

  app.get('/', async (c) => {
    const query = listQuery.safeParse(c.req.query());
    if (!query.success) {
      const badStatus = query.error.issues.some((issue) => issue.path[0] === 'status');
      return c.html(messagePage('Invalid page', badStatus ? `status is one of ${RUN_STATUSES.join(', ')}` : `limit is a whole number from 1 to ${MAX_PAGE}`), 400);
    }
    const { cursor, limit, status } = query.data;
    let page;
    try {
      page = await listRunsPage(deps.store, { limit: limit ?? 100, ...(cursor ? { cursor } : {}), ...(status ? { status } : {}) });
    } catch (error) {
      if (error instanceof StepwiseError && isPermanent(error)) return c.html(messagePage('Invalid page', error.message), 400);
      throw error;
    }
    const runs = await Promise.all(page.runs.map(async (summary) => {
      // The bounded read a resume makes: a run of thousands of steps read whole cost the page 50-170 ms
      // each. Its cost then prices the condensed steps by the run's last model, marked as such (runsPage).
      const stored = await deps.store.load(summary.runId, { recent: true });
      try {
        return { summary, ...(stored ? { state: decodeState(stored) } : {}) };
      } catch (error) {
        // A live run written by newer code shows what it needs: no worker of this version can move it.
        return { summary, ...(error instanceof NewerFormatError && !isTerminal(summary.status) ? { needs: error.needs } : {}) };
      }
    }));
    const older = page.next ? `${root}?cursor=${page.next}${limit ? `&limit=${limit}` : ''}${status ? `&status=${status}` : ''}` : undefined;
    return c.html(runsPage({ root, runs, now: deps.clock.now(), model: model(), ...(older ? { older } : {}), ...(status ? { status } : {}) }));
  });

  app.get('/runs/:runId', async (c) => {
    const runId = c.req.param('runId');
    const query = pageQuery.safeParse(c.req.query());
    if (!query.success) return c.html(messagePage('Invalid page', `limit is a whole number from 1 to ${MAX_PAGE}`), 400);
    // Read as a resume reads it, and below the records of the page's steps alone: a run of 50,000 steps
    // was read whole for a page of 200 checkpoints.
    const state = await resumed(deps, runId);
    if (!state.ok) return c.html(state.page, state.status);
    const stored = state.stored;
    const { cursor, limit } = query.data;
    // A page of the timeline, newest first: a run of 2,500 steps was 1.4 MB of HTML in one page.
    let history;
    try {
      history = await historyPage(deps.store, runId, { limit: limit ?? RUN_PAGE_CHECKPOINTS, ...(cursor ? { cursor } : {}) });
    } catch (error) {
      if (error instanceof StepwiseError && isPermanent(error)) return c.html(messagePage('Invalid page', error.message), 400);
      throw error;
    }
    const self = `${root}/runs/${encodeURIComponent(runId)}`;
    const pages = {
      ...(history.next ? { older: `${self}?cursor=${history.next}${limit ? `&limit=${limit}` : ''}` } : {}),
      ...(cursor ? { newest: self } : {}),
    };
    let records;
    try {
      records = await recordsOf(deps, state.state, stored.version, history.checkpoints.filter((h) => h.tool !== undefined).map((h) => h.step));
    } catch (error) {
      const page = errorPage(error);
      return c.html(page.page, page.status);
    }
    // Another agent's run on AWS is shown without the forms this inspector would refuse.
    const notHere = await otherAgentsRun(deps, runId);
    return c.html(runPage({
      root, state: state.state, version: stored.version, history: history.checkpoints, records, pages, model: model(), actions: notHere === undefined, now: deps.clock.now(),
      ...(notHere !== undefined ? { notHere } : {}), ...(stored.cancelRequested !== undefined ? { cancelRequested: stored.cancelRequested } : {}),
    }));
  });

  // One step whole, and its output as plain text: the timeline shows excerpts, and an output stored by
  // reference was out of the inspector's reach.
  app.get('/runs/:runId/steps/:step', async (c) => {
    const found = await stepOf(c, deps);
    if ('page' in found) return found.page;
    return c.html(stepPage({ root, runId: c.req.param('runId'), record: await withOutput(deps.blobs, found.record), model: model() }));
  });
  app.get('/runs/:runId/steps/:step/output', async (c) => {
    const found = await stepOf(c, deps);
    if ('page' in found) return found.page;
    const record = await withOutput(deps.blobs, found.record);
    if (record.outputMissing) {
      return c.html(messagePage('Output missing', `The whole output of step ${record.step} (${record.result.bytes} bytes) was stored as ${record.result.ref}, which the blob store no longer has.`), 404);
    }
    // As one missing: the whole output is not to be had, and reading again gives the same bytes.
    if (record.outputDamaged !== undefined) {
      return c.html(messagePage('Output damaged', `The whole output of step ${record.step} (${record.result.bytes} bytes) was stored as ${record.result.ref}, which the blob store gives back damaged: ${record.outputDamaged}.`), 404);
    }
    return c.text(record.output ?? record.result.text);
  });

  app.post('/runs/:runId/waits/:waitId', async (c) => {
    const runId = c.req.param('runId');
    const form = answerForm.safeParse(await readForm(c));
    if (!form.success) return c.html(messagePage('Not understood', 'Press Approve or Reject.'), 400);
    const stored = await deps.store.load(runId);
    const state = stored && decoded(stored);
    if (state && !state.ok) return c.html(state.page, state.status);
    const wait = state?.state.wait;
    // The inspector answers for the operator who holds the API token, as the approver they choose on the
    // form (one of the wait's: the answer is refused otherwise), else its first: every answer was recorded
    // under the first approver, whoever of several gave it.
    const by = form.data.as || (wait?.approvers?.[0] ?? 'operator');
    const comment = form.data.comment?.trim();
    const outcome = await answerWait(deps, {
      runId, waitId: c.req.param('waitId'),
      answer: { kind: form.data.decision === 'approve' ? 'approved' : 'rejected', by, comment: comment ? `${comment} (from the inspector)` : 'from the inspector' },
    });
    if (outcome.outcome === 'resumed') return back(c, runId);
    const { page, status } = notTakenPage(outcome);
    return c.html(page, status);
  });

  // The same operations as the API's POST /runs/:id/fork, /retry and /cancel, from forms.
  app.post('/runs/:runId/fork', async (c) => {
    const form = await readForm(c);
    const given = form?.fromStep;
    // Digits only, as GET /runs/:id/steps/:step reads a step: Number() would read "" as step 0, and " 3",
    // "0x2" and "1e0" as other steps than the form shows.
    const fromStep = typeof given === 'string' && /^\d{1,9}$/.test(given) ? Number(given) : undefined;
    if (fromStep === undefined) {
      const got = typeof given === 'string' ? `got ${JSON.stringify(given)}` : 'got none';
      return c.html(messagePage('Not understood', `The step to fork from is a whole number from 0, in digits only; ${got}.`), 400);
    }
    const limits = limitsOf(form);
    if ('refused' in limits) return c.html(messagePage('Not understood', `${limits.refused} Nothing was changed.`), 400);
    return refusal(c, async () => {
      const forked = await forkRun(deps, c.req.param('runId'), { fromStep, ...limits, pricingModel: model() });
      return back(c, forked.runId);
    });
  });
  app.post('/runs/:runId/retry', async (c) => {
    const limits = limitsOf(await readForm(c));
    if ('refused' in limits) return c.html(messagePage('Not understood', `${limits.refused} Nothing was changed.`), 400);
    return refusal(c, async () => {
      await retryRun(deps, c.req.param('runId'), { ...limits, pricingModel: model() });
      return back(c, c.req.param('runId'));
    });
  });
  app.post('/runs/:runId/cancel', (c) => refusal(c, async () => {
    await cancelRun(deps, c.req.param('runId'), { by: 'the inspector', reason: 'cancelled from the run inspector' });
    return back(c, c.req.param('runId'));
  }));
  return app;
}

/**
 * The run's state, or the page that says why it cannot be shown: a checkpoint no code can read, or one
 * written by newer code (the list shows both by status; a browser gets a page, not the API's JSON).
 */
function decoded(stored: Parameters<typeof decodeState>[0]): { ok: true; state: ReturnType<typeof decodeState> } | { ok: false; page: Page; status: 409 | 500 } {
  try {
    return { ok: true, state: decodeState(stored) };
  } catch (error) {
    return { ok: false, ...errorPage(error) };
  }
}

/**
 * The run as a resume reads it (its block summaries and the records after them), read whole only where a
 * summary of an older release has no cost (as GET /runs/:id reads it), or the page that says why not.
 */
async function resumed(deps: HttpDeps, runId: string): Promise<{ ok: true; stored: StoredCheckpoint; state: RunState } | { ok: false; page: Page; status: 404 | 409 | 500 }> {
  try {
    const read = await loadAsResumed(deps.store, runId, (state) => !unheldBlocksPriced(state));
    if (!read) return { ok: false, page: messagePage('Unknown run', `There is no run ${runId}.`), status: 404 };
    return { ok: true, ...read };
  } catch (error) {
    return { ok: false, ...errorPage(error) };
  }
}

/**
 * The records of the steps `named` (completed steps of `state`'s run) and of those between them, from the
 * first: those `state` holds, and the earlier ones read alone (CheckpointStore.records).
 */
async function recordsOf(deps: HttpDeps, state: RunState, version: number, named: readonly number[]): Promise<StepRecord[]> {
  if (!named.length) return [];
  const low = Math.min(...named) - 1;
  const from = state.stepsFrom ?? 0;
  const through = Math.min(Math.max(...named), from);
  const read = low < through ? decodeRecords(state.runId, version, await deps.store.records(state.runId, { after: low, through }), low, through) : [];
  return [...read, ...state.steps.filter((s) => s.step > low)];
}

/** The page that says why a run cannot be shown (decodeState's refusals); any other error is thrown. */
function errorPage(error: unknown): { page: Page; status: 409 | 500 } {
  if (error instanceof NewerFormatError) {
    return { status: 409, page: messagePage('Written by newer code', `${error.message}. Open it with an inspector of a version that reads it; nothing was changed.`) };
  }
  if (error instanceof UnreadableCheckpointError) {
    return { status: 500, page: messagePage('Unreadable checkpoint', `${error.message}. \`stepwise status\` and the run list show it by its status; nothing was changed.`) };
  }
  throw error;
}

/** The record of the step a step page names, or the page that says why there is none. */
async function stepOf(c: Context, deps: HttpDeps): Promise<{ record: StepRecord } | { page: Response }> {
  const runId = c.req.param('runId')!;
  const given = c.req.param('step')!;
  // Digits only, as the fork form and GET /runs/:id/steps/:step read a step.
  if (!/^\d{1,9}$/.test(given)) return { page: await c.html(messagePage('Invalid page', `The step is a whole number from 1, in digits only; got ${JSON.stringify(given)}.`), 400) };
  // The run as a resume reads it, and a step before the records that holds read alone.
  const state = await resumed(deps, runId);
  if (!state.ok) return { page: await c.html(state.page, state.status) };
  const step = Number(given);
  let record;
  try {
    record = step >= 1 && step <= state.state.step
      ? (await recordsOf(deps, state.state, state.stored.version, [step]))[0]
      : undefined;
  } catch (error) {
    const page = errorPage(error);
    return { page: await c.html(page.page, page.status) };
  }
  if (!record) return { page: await c.html(messagePage('No such step', `Run ${runId} has ${state.state.step} completed step${state.state.step === 1 ? '' : 's'}; step ${step} has no record.`), 404) };
  return { record };
}


/**
 * The step cap and budget a Fork or Retry form gives, read as the CLI reads --step-cap, --budget-tokens and
 * --budget-usd: without them a capped run forked at its last step (the form's default) or an over-budget run
 * retried was always refused, and the refusal asked for a cap or a budget the form had no field for. A field
 * left empty is not given (the run's own, or a retry's raised cap); any other value that is not one is
 * refused, naming the field, before anything is read or written.
 */
function limitsOf(form: Record<string, unknown> | undefined): { stepCap?: number; budget?: Budget } | { refused: string } {
  const field = (name: string, label: string, parse: (text: string) => number | undefined, kind: string) => {
    const given = form?.[name];
    if (given === undefined || given === '') return {};
    const value = typeof given === 'string' ? parse(given) : undefined;
    if (value !== undefined) return { value };
    const got = typeof given === 'string' ? `got ${JSON.stringify(given)}` : Array.isArray(given) ? 'got it more than once' : 'got a file';
    return { refused: `The ${label} (${name}) is ${kind}, or left empty for the run's own; ${got}.` };
  };
  const whole = 'a whole number from 1, in digits only';
  const stepCap = field('stepCap', 'step cap', wholeAboveZero, whole);
  const tokens = field('budgetTokens', 'token budget', wholeAboveZero, whole);
  const usd = field('budgetUsd', 'dollar budget', dollarsAboveZero, 'a number of dollars above 0, in plain decimals (0.000001, not 1e-6)');
  const refused = [stepCap, tokens, usd].map((f) => f.refused).filter((r) => r !== undefined);
  if (refused.length) return { refused: refused.join(' ') };
  const budget = { ...(tokens.value !== undefined ? { tokens: tokens.value } : {}), ...(usd.value !== undefined ? { usd: usd.value } : {}) };
  return { ...(stepCap.value !== undefined ? { stepCap: stepCap.value } : {}), ...(Object.keys(budget).length ? { budget } : {}) };
}

/** An operation the run's state refuses (retry a completed run, fork past its last step): a page that says why. */
async function refusal(c: Context, operate: () => Promise<Response>): Promise<Response> {
  try {
    return await operate();
  } catch (error) {
    if (error instanceof StepwiseError && isPermanent(error)) return c.html(messagePage('Not done', error.message), 409);
    throw error;
  }
}

/**
 * A form that cancels, forks, retries or answers must come from the inspector's own pages. SameSite=Strict
 * does not stop another origin of the same site: a page on another port of 127.0.0.1 (another local
 * server) is same-site, so its form posted with the operator's cookie and cancelled a run; behind a signing
 * proxy on AWS there is no cookie at all. A browser says where a form came from (Sec-Fetch-Site, else
 * Origin); a request with neither is no browser's, and is left to the token.
 */
const sameOriginForms: MiddlewareHandler = async (c, next) => {
  if (c.req.method === 'GET' || c.req.method === 'HEAD') return next();
  const site = c.req.header('sec-fetch-site');
  const origin = c.req.header('origin');
  const own = site !== undefined ? site === 'same-origin' : origin === undefined || hostOf(origin) === new URL(c.req.url).host;
  if (own) return next();
  return c.html(messagePage('Refused', `This form was sent from another site (${origin ?? site}), not from the inspector's own page; nothing was changed. Open the run in the inspector and use its buttons.`), 403);
};

const hostOf = (origin: string) => {
  try {
    return new URL(origin).host;
  } catch {
    // "null" (a sandboxed frame, a data: URL) or garbage: no origin of ours.
    return undefined;
  }
};

/**
 * The API token, or the session cookie `/inspect?token=...` sets. The cookie holds a value derived from the
 * token, not the token: browsers keep cookies by host, not port, so another server on the same host with an
 * /inspect path is sent it, and the token itself would open the whole API. Marked Secure when the page came
 * over HTTPS (a TLS proxy in front of `stepwise serve` says so in X-Forwarded-Proto).
 */
function tokenOrCookie(token: string, prefix: string, refuse: RefuseAuth): MiddlewareHandler {
  const session = createHmac('sha256', token).update('stepwise inspector session v1').digest('base64url');
  const matches = tokensMatch;
  return async (c, next) => {
    const query = c.req.query('token');
    if (c.req.method === 'GET' && query !== undefined && matches(query, token)) {
      const secure = new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto') === 'https';
      setCookie(c, COOKIE, session, { httpOnly: true, sameSite: 'Strict', path: `${prefix}/inspect`, secure });
      // Out of the address bar (and its history) at once.
      return c.redirect(`${prefix}${c.req.path}`, 303);
    }
    const cookie = getCookie(c, COOKIE);
    const authorization = c.req.header('authorization');
    if (!matches(cookie, session) && !matches(bearerToken(authorization), token)) {
      const retryAfter = refuse(c, query === undefined && cookie === undefined && authorization === undefined ? 'missing' : 'wrong');
      if (retryAfter !== undefined) {
        c.header('Retry-After', String(retryAfter));
        return c.html(messagePage('Too many tries', `Too many requests from this address came without the right token: try again in ${retryAfter} s.`), 429);
      }
      return c.html(messagePage('Sign in', `Open ${prefix}/inspect?token=<the API token> (stepwise serve prints where it keeps it).`), 401);
    }
    await next();
  };
}
