import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpApp, runWaitingForApproval } from '../support/http-app.ts';
import { APPROVER } from '../support/wait-agent.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const json = async (response: Response) => ({ status: response.status, headers: response.headers, body: await response.json() as any });
const post = (path: string, body: unknown) => app.api(path, { method: 'POST', body: JSON.stringify(body) });

/** What a client of the JSON API relies on whatever the route: the status, the headers, one error shape. */
describe('the JSON API as a client reads it', () => {
  it('an answer not taken says why in `error`, as every other refusal does, beside its outcome', async () => {
    await runWaitingForApproval(app, 'contract-wait');
    const waitId = ((await json(await app.api('/waits'))).body.waits as { runId: string; id: string }[]).find((w) => w.runId === 'contract-wait')!.id;
    const cases = [
      ['/runs/nobody/waits/w1', { decision: 'approve', by: APPROVER }, 404, 'unknown-run', /^unknown run: nobody$/],
      ['/runs/contract-wait/waits/other', { decision: 'approve', by: APPROVER }, 409, 'not-waiting', /waits for another answer now/],
      [`/runs/contract-wait/waits/${waitId}`, { decision: 'approve', by: 'mallory@example.com' }, 403, 'refused', /^refused: /],
    ] as const;
    for (const [path, body, status, outcome, error] of cases) {
      const answer = await json(await post(path, body));
      expect(answer.status, path).toBe(status);
      expect(answer.body, path).toMatchObject({ outcome, error: expect.stringMatching(error) });
    }
    expect((await json(await post(`/runs/contract-wait/waits/${waitId}`, { decision: 'approve', by: APPROVER }))).body).toMatchObject({ outcome: 'resumed' });
    const twice = await json(await post(`/runs/contract-wait/waits/${waitId}`, { decision: 'reject', by: APPROVER }));
    expect(twice).toMatchObject({ status: 409, body: { outcome: 'already-answered', error: expect.stringMatching(/Nothing changed\.$/) } });
  });
});
