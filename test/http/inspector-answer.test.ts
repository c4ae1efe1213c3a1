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

    // The one that was taken goes back to the run's page.
    const taken = await answer('insp-ok', await waiting('insp-ok'), 'approve');
    expect(taken.status).toBe(303);
    expect(taken.headers.get('location')).toBe('/inspect/runs/insp-ok');
  });
});
