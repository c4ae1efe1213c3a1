import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerToken } from '../../lib/http/bearer.ts';
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

  it('a path asked with a method it does not take is a 405 naming those it takes; OPTIONS names them; an unknown path stays a 404', async () => {
    for (const [method, path, allow] of [
      ['PUT', '/runs', 'GET, HEAD, OPTIONS, POST'],
      ['PUT', '/runs/some-run', 'DELETE, GET, HEAD, OPTIONS'],
      ['PATCH', '/runs/some-run', 'DELETE, GET, HEAD, OPTIONS'],
      ['GET', '/runs/some-run/cancel', 'OPTIONS, POST'],
      ['GET', '/events', 'OPTIONS, POST'],
      ['POST', '/waits', 'GET, HEAD, OPTIONS'],
      ['DELETE', '/runs/some-run/waits/w1', 'OPTIONS, POST'],
    ] as const) {
      const refused = await json(await app.api(path, { method, ...(method === 'GET' ? {} : { body: '{}' }) }));
      expect(refused.status, `${method} ${path}`).toBe(405);
      expect(refused.headers.get('allow'), `${method} ${path}`).toBe(allow);
      expect(refused.body.error, `${method} ${path}`).toBe(`${path} takes ${allow}, not ${method}`);
    }
    const options = await app.api('/runs/some-run/history', { method: 'OPTIONS' });
    expect(options.status).toBe(204);
    expect(options.headers.get('allow')).toBe('GET, HEAD, OPTIONS');
    for (const [method, path] of [['GET', '/no/such/route'], ['PUT', '/no/such/route'], ['GET', '/runs/'], ['OPTIONS', '/nothing']] as const) {
      const missing = await json(await app.api(path, { method }));
      expect(missing.status, `${method} ${path}`).toBe(404);
      expect(missing.headers.get('allow')).toBeNull();
      expect(missing.body.error).toBe(`no route ${method} ${path}`);
    }
    // Still behind the token: a caller without it learns nothing of the routes.
    expect((await fetch(`${app.url}/runs`, { method: 'PUT' })).status).toBe(401);
  });

  it('a POST that creates a run says where it is in Location, relative to the URL posted to; one that creates nothing does not', async () => {
    const started = await post('/runs', { goal: 'copy the rows', runId: 'contract:loc' });
    expect(started.status).toBe(201);
    const location = new URL(started.headers.get('location')!, `${app.url}/runs`).href;
    expect(location).toBe(`${app.url}/runs/contract%3Aloc`);
    expect((await json(await app.api(new URL(location).pathname))).body.run).toMatchObject({ runId: 'contract:loc' });
    const again = await post('/runs', { goal: 'copy the rows', runId: 'contract:loc' });
    expect(again.status).toBe(200);
    expect(again.headers.get('location')).toBeNull();

    const forked = await post('/runs/contract:loc/fork', { fromStep: 0, runId: 'contract-fork' });
    expect(forked.status).toBe(201);
    expect(new URL(forked.headers.get('location')!, `${app.url}/runs/contract:loc/fork`).href).toBe(`${app.url}/runs/contract-fork`);
    // Under a proxy's path prefix, the same answers resolve under it.
    expect(new URL(started.headers.get('location')!, 'https://host.example/stepwise/runs').href).toBe('https://host.example/stepwise/runs/contract%3Aloc');
    expect(new URL(forked.headers.get('location')!, 'https://host.example/stepwise/runs/contract:loc/fork').href).toBe('https://host.example/stepwise/runs/contract-fork');
    expect((await post('/runs/contract:loc/fork', { fromStep: 0, runId: 'contract-fork' })).headers.get('location')).toBeNull();
  });

  it('a 401 names the scheme it wants in WWW-Authenticate; the scheme is read in any case, the token exactly', async () => {
    const token = 'test-token-123';
    for (const authorization of [undefined, 'Bearer wrong', `Token ${token}`, `Basic ${Buffer.from(`x:${token}`).toString('base64')}`, token, `Bearer ${token}x`, `Bearer ${token.toUpperCase()}`]) {
      for (const path of ['/runs', '/inspect']) {
        const refused = await fetch(`${app.url}${path}`, { headers: authorization ? { authorization } : {} });
        expect(refused.status, `${path} ${authorization}`).toBe(401);
        if (path === '/runs') expect(refused.headers.get('www-authenticate'), authorization).toBe('Bearer');
      }
    }
    for (const authorization of [`Bearer ${token}`, `bearer ${token}`, `BEARER  ${token}`]) {
      for (const path of ['/runs', '/inspect']) expect((await fetch(`${app.url}${path}`, { headers: { authorization } })).status, `${path} ${authorization}`).toBe(200);
    }
    expect(bearerToken('Bearer a token with spaces')).toBe('a token with spaces');
    // Never from the query string, where it would be logged with the URL.
    expect((await fetch(`${app.url}/runs?token=${token}`)).status).toBe(401);
  });

  it('a fork under the id of another run is a 409 that names it, as a start under a taken id is, changing nothing', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'contract-parent' })).status).toBe(201);
    expect((await post('/runs', { goal: 'another goal', runId: 'contract-taken' })).status).toBe(201);
    const taken = await json(await post('/runs/contract-parent/fork', { fromStep: 0, runId: 'contract-taken' }));
    expect(taken).toMatchObject({
      status: 409, body: { runId: 'contract-taken', error: 'run contract-taken already exists and is not a fork of contract-parent at step 0: choose another run id' },
    });
    expect(taken.headers.get('location')).toBeNull();
    expect((await app.runtime.store.load('contract-taken'))!.version).toBe(1);
  });

  it('a run whose checkpoint no code can read is a 500 that says so on every route that reads it, as the inspector says, not a 400 blaming the request', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'contract-bad' })).status).toBe(201);
    const { head } = app.runtime.db.prepare("SELECT head FROM checkpoints WHERE run_id = 'contract-bad' AND version = 1").get() as { head: string };
    app.runtime.db.prepare("UPDATE checkpoints SET head = ? WHERE run_id = 'contract-bad' AND version = 1").run(JSON.stringify({ ...JSON.parse(head), usage: null }));
    for (const [method, path, body] of [
      ['GET', '/runs/contract-bad', undefined],
      ['GET', '/runs/contract-bad/steps/0', undefined],
      ['POST', '/runs/contract-bad/retry', {}],
      ['POST', '/runs/contract-bad/fork', { fromStep: 0 }],
      ['POST', '/runs/contract-bad/waits/w1', { decision: 'approve', by: APPROVER }],
    ] as const) {
      const refused = await json(await app.api(path, { method, ...(body ? { body: JSON.stringify(body) } : {}) }));
      expect(refused.status, path).toBe(500);
      expect(refused.body, path).toMatchObject({ error: expect.stringMatching(/(checkpoint 1 of run contract-bad is unreadable|its latest checkpoint cannot be read).*; nothing (was )?changed$/), runId: 'contract-bad', version: 1 });
    }
    expect((await app.api('/inspect/runs/contract-bad')).status).toBe(500);
    expect((await app.runtime.store.load('contract-bad'))).toMatchObject({ version: 1, status: 'running' });
  });
});
