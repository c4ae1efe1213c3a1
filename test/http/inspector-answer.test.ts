import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';
import { APPROVER } from '../support/wait-agent.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const answer = (runId: string, waitId: string, decision: string) => app.api(`/inspect/runs/${runId}/waits/${waitId}`, {
  method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ decision }).toString(),
});

/** A run worked until it waits for its approval, and the id of that wait. */
async function waiting(runId: string): Promise<string> {
  expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId }) })).status).toBe(201);
  await workVisible(app.deps, app.runtime);
  return decodeState((await app.runtime.store.load(runId))!).wait!.id;
}

describe("the inspector's approval form", () => {
  it('an answer that lost (another answer came first, the run was cancelled) says what became of the wait, as the approval page does', async () => {
    const waitId = await waiting('insp-a');
    const api = await app.api(`/runs/insp-a/waits/${waitId}`, { method: 'POST', body: JSON.stringify({ decision: 'reject', by: APPROVER, comment: 'not today' }) });
    expect(api.status).toBe(200);
    const late = await answer('insp-a', waitId, 'approve');
    expect(late.status).toBe(409);
    expect(await late.text()).toMatch(new RegExp(`Already rejected by ${APPROVER} at [^,]+, with the comment: not today\\.`));

    const cancelledWait = await waiting('insp-c');
    expect((await app.api('/runs/insp-c/cancel', { method: 'POST', body: JSON.stringify({ by: 'ops@example.com' }) })).status).toBe(200);
    const afterCancel = await answer('insp-c', cancelledWait, 'approve');
    expect(afterCancel.status).toBe(409);
    expect(await afterCancel.text()).toContain('This run is no longer waiting for this approval (it is cancelled).');
    expect(decodeState((await app.runtime.store.load('insp-c'))!).status).toBe('cancelled');

    // A body that does not parse as the multipart form it names: not understood, not a 500.
    const unparsed = await app.api(`/inspect/runs/insp-c/waits/${cancelledWait}`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'multipart/form-data' }, body: 'decision=approve' });
    expect(unparsed.status).toBe(400);
    expect(await unparsed.text()).toContain('Press Approve or Reject.');

    // The one that was taken goes back to the run's page.
    const taken = await answer('insp-ok', await waiting('insp-ok'), 'approve');
    expect(taken.status).toBe(303);
    expect(taken.headers.get('location')).toBe('/inspect/runs/insp-ok');
  });

  it('the wait says its deadline in UTC and how far off it is; past it, that it passed and what resumes the run, and no form', async () => {
    await waiting('insp-t');
    const deadline = decodeState((await app.runtime.store.load('insp-t'))!).wait!.deadline;
    const utc = `${new Date(deadline).toISOString().replace('T', ' ').slice(0, 19)} UTC`;
    const page = async () => (await app.api('/inspect/runs/insp-t')).text();
    // Its time was bare ("until 2023-11-14 23:13:20"), and read by an operator elsewhere as their own.
    const before = await page();
    expect(before).toContain(`(step 2, request_approval), until ${utc} (in 60 min)</p>`);
    expect(before).toContain('value="approve"');
    app.clock.advance(deadline - app.clock.now() + 2 * 3_600_000);
    // Its Approve, past the deadline, resumed the run with "timed out".
    const after = await page();
    expect(after).toContain(`until ${utc}: its deadline passed 2 h ago, and the next worker to take the run resumes it with "timed out"</p>`);
    expect(after).not.toContain('value="approve"');
  });

  it('labels its comment field, as the approval page does: a placeholder alone is gone once the operator types, and is no label', async () => {
    await waiting('insp-l');
    const page = await (await app.api('/inspect/runs/insp-l')).text();
    expect(page).toMatch(/<label>comment \(the run's model sees it\) <input type="text" name="comment" maxlength="4000"><\/label>/);
    // The comment's field has no placeholder (the fork and retry forms' limit fields have labels and one each).
    expect(page).not.toMatch(/<input[^>]*name="comment"[^>]*placeholder=/);
    expect(page.match(/<input [^>]*placeholder=/g)?.every((input) => /name="(stepCap|budgetTokens|budgetUsd)"/.test(input))).toBe(true);
  });

  it('with several approvers, answers as the one the operator chooses, recorded so; one not among them is refused', async () => {
    const approvers = ['ops@example.com', 'lead@example.com'];
    const several = await startHttpApp({ approvers });
    try {
      expect((await several.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'insp-s' }) })).status).toBe(201);
      await workVisible(several.deps, several.runtime);
      const waitId = decodeState((await several.runtime.store.load('insp-s'))!).wait!.id;
      const page = await (await several.api('/inspect/runs/insp-s')).text();
      expect(page).toContain('<label>answering as <select name="as"><option>ops@example.com</option><option>lead@example.com</option></select></label>');
      const post = (form: Record<string, string>) => several.api(`/inspect/runs/insp-s/waits/${waitId}`, {
        method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(form).toString(),
      });
      const stranger = await post({ decision: 'approve', as: 'intruder@example.com' });
      expect(stranger.status).toBe(403);
      expect(decodeState((await several.runtime.store.load('insp-s'))!).status).toBe('waiting');
      expect((await post({ decision: 'approve', as: 'lead@example.com' })).status).toBe(303);
      await workVisible(several.deps, several.runtime);
      const answered = decodeState((await several.runtime.store.load('insp-s'))!).steps.find((s) => s.waitId === waitId)!;
      // Recorded under the approver who answered, where it was always the first.
      expect(answered.result.text).toContain('"by":"lead@example.com"');
    } finally {
      await several.close();
    }
    // One approver: no choice to make, so no field.
    await waiting('insp-one');
    expect(await (await app.api('/inspect/runs/insp-one')).text()).not.toContain('name="as"');
  });
});
