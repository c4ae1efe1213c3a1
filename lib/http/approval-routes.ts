import { Hono, type Context } from 'hono';
import * as z from 'zod';
import { decodeState } from '../core/codec.ts';
import { InvalidInputError } from '../core/errors.ts';
import { answerWait } from '../waits/answer.ts';
import { MALFORMED_LINK, verifyApproval, type ApprovalClaim } from '../waits/approval-token.ts';
import { keysOf, type SigningKeys } from '../waits/signing-key.ts';
import type { HttpDeps } from './deps.ts';
import { otherAgentsRun } from './other-agent.ts';
import { describeAnswer } from '../core/waits.ts';
import { approvalPage, messagePage, notTakenPage, notWaiting, pageHeaders } from './pages.ts';
import { readForm } from './read-form.ts';
import { limitBody } from './body-limit.ts';
import type { RefuseAuth } from './auth-refusal.ts';

const decisionForm = z.object({
  decision: z.enum(['approve', 'reject']),
  // A browser posts the textarea's line breaks as CRLF, where its maxlength counted each as one character:
  // a comment typed to the limit with line breaks came in longer than 4,000 and was refused, the answer
  // lost. Read as the approver typed it, one \n a line break.
  comment: z.preprocess((value) => (typeof value === 'string' ? value.replace(/\r\n?/g, '\n') : value), z.string().max(4000)).optional(),
});

/**
 * The pages an approval email links to. A GET only shows the request; mail scanners and link previews
 * open links, so nothing is decided until the approver presses a button (a POST). The token in the path
 * is the credential: signed, bound to one wait and one approver, expiring with the wait.
 */
export function approvalRoutes(deps: HttpDeps, refuse: RefuseAuth): Hono {
  const app = new Hono();
  // The token is in the URL: it must not leak through a Referer, a cache, or a frame.
  app.use('*', pageHeaders({ noReferrer: true }));
  // The link's token, the one credential here, is checked in the route itself (body-limit.ts).
  app.use('*', limitBody);

  app.get('/:token', async (c) => {
    const checked = await check(c, deps, refuse);
    if ('page' in checked) return checked.page;
    const { claim } = checked;
    const stored = await deps.store.load(claim.runId);
    if (!stored) return c.html(messagePage('Unknown run', `Run ${claim.runId} does not exist (any more).`), 404);
    const state = decodeState(stored);
    if (state.status !== 'waiting' || state.wait?.id !== claim.waitId) {
      const record = state.steps.findLast((s) => s.waitId === claim.waitId);
      return c.html(messagePage('Nothing to decide', record ? describeAnswer(record) : notWaiting(state.status === 'waiting', state.status)), 409);
    }
    // A cancel asked for while the step that began this wait ran: the run is still waiting on record until
    // the cancel is applied, and an answer would only apply it. Said now, not after the approver presses.
    if (stored.cancelRequested !== undefined) {
      return c.html(messagePage('Nothing to decide', `This run is being cancelled (${stored.cancelRequested}): it takes no answer.`), 409);
    }
    // The form has no action: it posts to the address the approver opened, the emailed link. The path the
    // server sees lacks any prefix a proxy took off (STEPWISE_PUBLIC_URL https://host/stepwise, the proxy
    // passing /approvals/... on), and a form posting there went past the proxy: Approve answered a 404.
    return c.html(approvalPage({ state, wait: state.wait, approver: claim.approver }));
  });

  app.post('/:token', async (c) => {
    const checked = await check(c, deps, refuse);
    if ('page' in checked) return checked.page;
    const { claim } = checked;
    const form = decisionForm.safeParse(await readForm(c));
    if (!form.success) return c.html(messagePage('Not understood', 'Press Approve or Reject on the approval page; a comment may be at most 4,000 characters.'), 400);
    const comment = form.data.comment?.trim();
    const outcome = await answerWait(deps, {
      runId: claim.runId, waitId: claim.waitId,
      answer: { kind: form.data.decision === 'approve' ? 'approved' : 'rejected', by: claim.approver, ...(comment ? { comment } : {}) },
    });
    if (outcome.outcome !== 'resumed') {
      const { page, status } = notTakenPage(outcome);
      return c.html(page, status);
    }
    return c.html(messagePage(
      form.data.decision === 'approve' ? 'Approved' : 'Rejected',
      form.data.decision === 'approve' ? 'Approved. The run continues.' : 'Rejected. The run continues and its model sees your answer.',
    ));
  });

  // Anything else under /approvals is a link cut short (/approvals/) or run on (a slash, more path after
  // the token): said so on a page, where it went on to the API's bearer check and told the approver to
  // send an Authorization header.
  app.all('*', (c) => tooMany(c, refuse(c, 'malformed')) ?? c.html(messagePage('Invalid link', MALFORMED_LINK), 400));
  return app;
}

async function check(c: Context, deps: HttpDeps, refuse: RefuseAuth): Promise<{ claim: ApprovalClaim } | { page: Response | Promise<Response> }> {
  let keys: SigningKeys;
  try {
    keys = keysOf(await deps.signingKey());
  } catch (error) {
    // The deployment's key, not the link: a key file left empty or cut short was an InvalidInputError, a
    // 400 that blamed the approver's request and showed them the key file's path. The operator's to mend.
    if (!(error instanceof InvalidInputError)) throw error;
    deps.log.error({ event: 'signing-key-unusable', error: error.message }, 'approval links cannot be checked: the signing key is unusable');
    return { page: c.html(messagePage('Not done', 'This server cannot check approval links now: its signing key is unusable, which its operator is told. Nothing was changed; try the link again later.'), 500) };
  }
  const result = verifyApproval(c.req.param('token') ?? '', keys.accepted, deps.clock.now());
  if (result.ok) {
    // A link of another agent's run, signed by a key the agents share (a key file off AWS), opened on this
    // agent's API: its answer would send the run's next message to this queue (other-agent.ts).
    const notHere = await otherAgentsRun(deps, result.claim.runId);
    if (notHere) return { page: c.html(messagePage('Not here', `${notHere}. Nothing was changed.`), 409) };
    return { claim: result.claim };
  }
  const retryAfter = refuse(c, result.reason === 'bad-signature' ? 'forged' : result.reason, result.claim ? { runId: result.claim.runId } : {});
  const throttled = tooMany(c, retryAfter);
  if (throttled) return { page: throttled };
  const status = result.reason === 'expired' ? 410 : result.reason === 'malformed' ? 400 : 403;
  const title = result.reason === 'expired' ? 'Link expired' : 'Invalid link';
  return { page: c.html(messagePage(title, result.message), status) };
}

/** The throttle's answer (auth-throttle.ts) to a link refused once too often from its address, if it holds it. */
function tooMany(c: Context, retryAfter: number | undefined): Response | Promise<Response> | undefined {
  if (retryAfter === undefined) return undefined;
  c.header('Retry-After', String(retryAfter));
  return c.html(messagePage('Too many tries', `Too many links from this address were not valid: try again in ${retryAfter} s, with the link from the email exactly as it was sent.`), 429);
}
