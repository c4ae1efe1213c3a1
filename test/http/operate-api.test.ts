import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { defineAgent } from '../../lib/agent.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const json = async (response: Response) => ({ status: response.status, body: await response.json() as any });
const post = (path: string, body: unknown) => app.api(path, { method: 'POST', body: JSON.stringify(body) });

describe('operating runs through the API', () => {
  it('wants the bearer token on the operating routes too', async () => {
    for (const [method, path] of [['POST', '/runs/x/fork'], ['POST', '/runs/x/retry'], ['POST', '/runs/x/cancel'], ['GET', '/runs/x/steps/1']] as const) {
      const response = await fetch(`${app.url}${path}`, { method, headers: { 'content-type': 'application/json' }, ...(method === 'POST' ? { body: '{}' } : {}) });
      expect(response.status, path).toBe(401);
    }
  });

  it('starts with a budget, shows the state at a step, forks from it and cancels', async () => {
    const started = await json(await post('/runs', { goal: 'copy the rows', runId: 'op-api', budget: { tokens: 100_000, usd: 2.5 } }));
    expect(started.status).toBe(201);
    expect((await json(await app.api('/runs/op-api'))).body.run.budget).toEqual({ tokens: 100_000, usd: 2.5 });
    expect((await post('/runs', { goal: 'x', budget: { tokens: 0 } })).status).toBe(400);
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('op-api'))!).status).toBe('waiting');

    const step = await json(await app.api('/runs/op-api/steps/1'));
    expect(step).toMatchObject({
      status: 200,
      body: { run: { runId: 'op-api', goal: 'copy the rows', status: 'waiting', step: 1 }, atStep: 1, record: { step: 1, tool: 'write_row', input: { row: 1 }, idempotencyKey: 'op-api/step-1', workerId: 'worker-A' } },
    });
    // Step 2 is the approval it waits at: named as such, not said to be missing.
    expect(await json(await app.api('/runs/op-api/steps/2'))).toMatchObject({ status: 404, body: { step: 2, runId: 'op-api', error: expect.stringMatching(/^step 2 of run op-api has no result yet: the run waits there for approval by ops@example\.com; its last completed step is 1/) } });
    // Past its last step: the run is there and the step is not, a 404 (not the 400 of a malformed path).
    expect(await json(await app.api('/runs/op-api/steps/3'))).toMatchObject({ status: 404, body: { error: 'run op-api has 1 completed step; there is no step 3', runId: 'op-api', step: 3 } });
    expect((await app.api('/runs/op-api/steps/one')).status).toBe(400);
    // Written otherwise, a number is still not a step: 0x1 and 1e0 are not read as step 1.
    for (const written of ['0x1', '1e0', '%201', '-1', '1.0']) {
      const refused = await json(await app.api(`/runs/op-api/steps/${written}`));
      expect(refused.status, written).toBe(400);
      expect(refused.body.error, written).toMatch(/^invalid request: step: a whole number from 0/);
    }
    expect((await app.api('/runs/nobody/steps/1')).status).toBe(404);
    // A fork's fromStep past the end is its body's fault: still a 400.
    expect(await json(await post('/runs/op-api/fork', { fromStep: 3, runId: 'op-api-past' }))).toMatchObject({ status: 400, body: { error: 'run op-api has 1 completed step; there is no step 3' } });

    const forked = await json(await post('/runs/op-api/fork', { fromStep: 1, runId: 'op-api-f', goal: 'copy them again' }));
    expect(forked).toMatchObject({ status: 201, body: { runId: 'op-api-f', created: true, version: 1, forkedFrom: { runId: 'op-api', step: 1 } } });
    expect(await json(await post('/runs/op-api/fork', { fromStep: 1, runId: 'op-api-f' }))).toMatchObject({ status: 200, body: { created: false } });
    // The same fork asked again with another goal or step cap: a conflict, said, as a start's is.
    expect(await json(await post('/runs/op-api/fork', { fromStep: 1, runId: 'op-api-f', goal: 'copy them again' }))).toMatchObject({ status: 200, body: { created: false } });
    const other = await json(await post('/runs/op-api/fork', { fromStep: 1, runId: 'op-api-f', goal: 'drop them', stepCap: 9 }));
    expect(other).toMatchObject({ status: 409, body: { runId: 'op-api-f', created: false, unapplied: ['goal', 'stepCap'] } });
    expect(other.body.error).toBe('run op-api-f already exists, forked from op-api at step 1, with another goal and stepCap: nothing changed; use another runId for another fork');
    const badFork = await json(await post('/runs/op-api/fork', { runId: 'x' }));
    expect(badFork.status).toBe(400);
    expect(badFork.body.error).toContain('fromStep');
    const emptyId = await json(await post('/runs/op-api/fork', { fromStep: 1, runId: '' }));
    expect(emptyId).toMatchObject({ status: 400, body: { error: expect.stringMatching(/^run id "" must match/) } });
    expect((await post('/runs/nobody/fork', { fromStep: 0 })).status).toBe(404);

    const cancelled = await json(await post('/runs/op-api/cancel', { by: 'ops@example.com', reason: 'not needed' }));
    expect(cancelled).toMatchObject({ status: 200, body: { outcome: 'cancelled' } });
    expect((await json(await app.api('/runs/op-api'))).body.run).toMatchObject({ status: 'cancelled', reason: expect.stringContaining('by ops@example.com') });
    // Running, with no worker to take its message: the cancel takes it and applies itself.
    const idle = await json(await post('/runs/op-api-f/cancel', { by: 'ops@example.com' }));
    expect(idle).toMatchObject({ status: 200, body: { outcome: 'cancelled', idle: true } });
    expect(decodeState((await app.runtime.store.load('op-api-f'))!)).toMatchObject({ status: 'cancelled', step: 1, forkedFrom: { runId: 'op-api' } });
    expect((await post('/runs/op-api/cancel', {})).status).toBe(400);
    // What the run's status refuses is a conflict with the run (409), not a malformed request (400): a
    // client that asked again after a lost answer could not tell them apart.
    const retryCancelled = await json(await post('/runs/op-api/retry', {}));
    expect(retryCancelled).toMatchObject({ status: 409, body: { runId: 'op-api', status: 'cancelled' } });
    expect(retryCancelled.body.error).toContain('is cancelled');
  });

  it('a running run whose cancel is not yet applied says so, in GET /runs/:id and the inspector, until a worker applies it', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-req' })).status).toBe(201);
    // A worker has taken its message: the request waits beside the version, and the run is still running.
    const [inFlight] = await app.runtime.queue.forRun('op-req').receive({ visibilityMs: 30_000 });
    expect(await json(await post('/runs/op-req/cancel', { by: 'ops@example.com', reason: 'wrong table' }))).toMatchObject({ status: 200, body: { outcome: 'requested' } });
    const run = (await json(await app.api('/runs/op-req'))).body.run;
    expect(run).toMatchObject({ status: 'running', cancelRequested: expect.stringMatching(/^by ops@example\.com at .*: wrong table$/) });
    const page = await (await app.api('/inspect/runs/op-req')).text();
    expect(page).toContain(`<p id="cancel-requested">cancel requested <bdi>${run.cancelRequested}</bdi>; applied at the next step boundary`);
    // The lists say so too: the API's page of runs and the inspector's table.
    const listed = (await json(await app.api('/runs?status=running'))).body.runs as { runId: string; cancelRequested?: string }[];
    expect(listed.find((r) => r.runId === 'op-req')).toMatchObject({ cancelRequested: run.cancelRequested });
    expect(await (await app.api('/inspect')).text()).toMatch(/op-req<\/a><\/td><td class="agent">[^<]+<\/td><td class="status">running <span class="cancel-requested">\(cancel requested\)<\/span>/);

    await handleDelivery(app.deps, inFlight!);
    await app.runtime.queue.ack(inFlight!);
    const cancelled = (await json(await app.api('/runs/op-req'))).body.run;
    expect(cancelled).toMatchObject({ status: 'cancelled', reason: `cancelled ${run.cancelRequested}` });
    expect(cancelled.cancelRequested).toBeUndefined();
    expect(await (await app.api('/inspect/runs/op-req')).text()).not.toContain('cancel-requested');
    expect(await (await app.api('/inspect')).text()).not.toContain('cancel-requested');
  });

  it('retries a capped run with a raised cap', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-cap', stepCap: 1 })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('op-cap'))!).status).toBe('capped');
    expect((await post('/runs/op-cap/retry', { stepCap: 'many' })).status).toBe(400);
    const retried = await json(await post('/runs/op-cap/retry', { stepCap: 5, budget: { tokens: 10_000 } }));
    expect(retried).toMatchObject({ status: 200, body: { runId: 'op-cap', from: 'capped', stepCap: 5, budget: { tokens: 10_000 } } });
    // The same retry asked again finds the run running: a conflict, 409.
    expect(await json(await post('/runs/op-cap/retry', { stepCap: 5, budget: { tokens: 10_000 } }))).toMatchObject({ status: 409, body: { runId: 'op-cap', status: 'running' } });
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('op-cap'))!)).toMatchObject({ status: 'waiting', stepCap: 5 });
  });

  it('takes a retry with no body at all, with the JSON type a client library sends anyway', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-bare', stepCap: 1 })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    const bare = await json(await app.api('/runs/op-bare/retry', { method: 'POST' }));
    expect(bare).toMatchObject({ status: 200, body: { runId: 'op-bare', from: 'capped' } });
  });

  it('DELETE /runs/:id deletes a run that has ended, and is a conflict while it waits, 404 for a run not there', async () => {
    expect((await fetch(`${app.url}/runs/op-del`, { method: 'DELETE' })).status).toBe(401);
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-del', stepCap: 1 })).status).toBe(201);
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-del-waits' })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('op-del-waits'))!).status).toBe('waiting');
    const refused = await json(await app.api('/runs/op-del-waits', { method: 'DELETE' }));
    expect(refused).toMatchObject({ status: 409, body: { runId: 'op-del-waits', status: 'waiting', error: expect.stringContaining('only a run that has ended can be deleted') } });
    expect(await app.runtime.store.load('op-del-waits')).toBeDefined();
    const deleted = await json(await app.api('/runs/op-del', { method: 'DELETE' }));
    expect(deleted).toMatchObject({ status: 200, body: { outcome: 'deleted', runId: 'op-del', status: 'capped' } });
    expect(await app.runtime.store.load('op-del')).toBeUndefined();
    expect((await app.api('/runs/op-del')).status).toBe(404);
    expect(await json(await app.api('/runs/op-del', { method: 'DELETE' }))).toMatchObject({ status: 404, body: { error: expect.stringContaining('op-del') } });

    // On AWS, another agent's API on the same table does not delete this agent's run.
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-del-other', stepCap: 1 })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    const other = createHttpApp({ ...app.deps, signingKey: app.signingKey, agent: defineAgent({ ...app.deps.agent, name: 'cleanup-tables' }), agentQueue: true, apiToken: undefined });
    const theirs = await other.request('/runs/op-del-other', { method: 'DELETE' });
    expect(theirs.status).toBe(409);
    expect(((await theirs.json()) as { error: string }).error).toContain('belongs to agent');
    expect(await app.runtime.store.load('op-del-other')).toBeDefined();
  });

  it('DELETE /runs/:id is a 409 with Retry-After while an effect of the run still holds its key, and deletes it once the effect has finished', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-del-held', stepCap: 1 })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    // An effect of the ended run goes on (its try ended by the tool's timeoutMs): it holds its key.
    let finish!: (value: string) => void;
    let started!: () => void;
    const entered = new Promise<void>((resolve) => { started = resolve; });
    const done = app.runtime.ledger.once('op-del-held/step-2', {}, () => { started(); return new Promise<string>((resolve) => { finish = resolve; }); });
    await entered;

    const response = await app.api('/runs/op-del-held', { method: 'DELETE' });
    const refused = await json(response);
    expect(refused).toMatchObject({ status: 409, body: { runId: 'op-del-held', status: 'capped', key: 'op-del-held/step-2', error: expect.stringContaining('cannot be deleted yet: an effect of it is still running under idempotency key op-del-held/step-2') } });
    expect(Number(response.headers.get('retry-after'))).toBe(Math.ceil(refused.body.retryAfterMs / 1000));
    expect(refused.body.retryAfterMs).toBeGreaterThan(0);
    expect(await app.runtime.store.load('op-del-held')).toBeDefined();

    finish('applied');
    expect(await done).toBe('applied');
    expect(await json(await app.api('/runs/op-del-held', { method: 'DELETE' }))).toMatchObject({ status: 200, body: { outcome: 'deleted', runId: 'op-del-held' } });
  });

  it('a cancel of a run that has ended is a conflict with it, 409, naming its status', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-ended', stepCap: 1 })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    const refused = await json(await post('/runs/op-ended/cancel', { by: 'ops@example.com' }));
    expect(refused).toMatchObject({ status: 409, body: { runId: 'op-ended', status: 'capped', error: 'run op-ended has already ended (capped): nothing to cancel' } });
  });

  it('GET /runs/:id?after=v&waitSeconds=n answers once the run has a version past v, or when the seconds pass', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-wait' })).status).toBe(201);
    // Nothing moves it: the answer comes when the second passes, the run as it is.
    expect(await json(await app.api('/runs/op-wait?after=1&waitSeconds=1'))).toMatchObject({ status: 200, body: { run: { runId: 'op-wait', version: 1, status: 'running' } } });
    // A worker moves it while the request waits: the answer is the newer version.
    let answered = false;
    const waiting = app.api('/runs/op-wait?after=1&waitSeconds=20').then(async (response) => { answered = true; return json(response); });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(answered).toBe(false);
    await workVisible(app.deps, app.runtime);
    const moved = await waiting;
    expect(moved.status).toBe(200);
    expect(moved.body.run.version).toBeGreaterThan(1);
    // Past the version it has: at once.
    expect((await json(await app.api(`/runs/op-wait?after=0&waitSeconds=20`))).body.run.version).toBe(moved.body.run.version);
    for (const [query, error] of [
      ['after=1', /after and waitSeconds go together/],
      ['waitSeconds=5', /after and waitSeconds go together/],
      ['after=1&waitSeconds=21', /waitSeconds: a whole number from 1 to 20, got "21"/],
      ['after=-1&waitSeconds=2', /after: a whole number from 0/],
      ['after=1&waitSeconds=2&soon=1', /unknown query parameter "soon"/],
    ] as const) {
      const refused = await json(await app.api(`/runs/op-wait?${query}`));
      expect(refused.status, query).toBe(400);
      expect(refused.body.error, query).toMatch(error);
    }
    expect((await app.api('/runs/nobody?after=1&waitSeconds=1')).status).toBe(404);

    // While it waits it reads the run's head alone; the whole run once, for the answer.
    const store = app.runtime.store;
    const load = store.load.bind(store);
    const reads: ('head' | 'whole')[] = [];
    store.load = async (runId, options) => {
      reads.push(options?.afterStep === Number.MAX_SAFE_INTEGER ? 'head' : 'whole');
      return load(runId, options);
    };
    try {
      const version = moved.body.run.version as number;
      expect((await json(await app.api(`/runs/op-wait?after=${version}&waitSeconds=1`))).body.run.version).toBe(version);
      expect(reads.filter((r) => r === 'head').length).toBeGreaterThan(1);
      expect(reads.filter((r) => r === 'whole')).toEqual(['whole']);
      // An ended run will not move: answered at its first look, not when the 20 seconds pass.
      expect((await post('/runs/op-wait/cancel', { by: 'ops@example.com' })).status).toBe(200);
      const ended = (await json(await app.api('/runs/op-wait'))).body.run.version as number;
      reads.length = 0;
      expect((await json(await app.api(`/runs/op-wait?after=${ended}&waitSeconds=20`))).body.run).toMatchObject({ status: 'cancelled', version: ended });
      expect(reads).toEqual(['head', 'whole']);
    } finally {
      store.load = load;
    }
  });
});

/** Counts the head reads (a long poll's looks) of one run, from when it is called. */
function countLooks(store: typeof app.runtime.store, runId: string): { looks(): number; stop(): void } {
  const load = store.load.bind(store);
  let looks = 0;
  store.load = async (id, options) => {
    if (id === runId && options?.afterStep === Number.MAX_SAFE_INTEGER) looks++;
    return load(id, options);
  };
  return { looks: () => looks, stop: () => { store.load = load; } };
}

async function untilLooks(count: () => number, least: number): Promise<void> {
  while (count() < least) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('a long poll of GET /runs/:id', () => {
  it('stops looking at the run once its client has gone, where it looked every 250 ms for the rest of its seconds', async () => {
    expect((await post('/runs', { goal: 'copy the rows', runId: 'op-gone' })).status).toBe(201);
    const counted = countLooks(app.runtime.store, 'op-gone');
    try {
      const client = new AbortController();
      const polled = app.api('/runs/op-gone?after=1&waitSeconds=20', { signal: client.signal }).catch(() => 'aborted');
      await untilLooks(counted.looks, 2);
      client.abort();
      expect(await polled).toBe('aborted');
      // A second (four looks' time) for the close to reach the server, then another: no look in it.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const settled = counted.looks();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(counted.looks()).toBe(settled);
    } finally {
      counted.stop();
    }
  });

  it('answers with the run as it stands once the server is stopping, where it held the stop until its connection was cut', async () => {
    const stopping = new AbortController();
    const stoppable = await startHttpApp({ stopping: stopping.signal });
    try {
      expect((await stoppable.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'op-stop' }) })).status).toBe(201);
      const counted = countLooks(stoppable.runtime.store, 'op-stop');
      const polled = stoppable.api('/runs/op-stop?after=1&waitSeconds=20').then(json);
      await untilLooks(counted.looks, 2);
      stopping.abort();
      const atStop = counted.looks();
      expect(await polled).toMatchObject({ status: 200, body: { run: { runId: 'op-stop', version: 1, status: 'running' } } });
      // Its next look answers: the rest of the 20 seconds' 80 are not taken.
      expect(counted.looks()).toBeLessThanOrEqual(atStop + 1);
      counted.stop();
    } finally {
      await stoppable.close();
    }
  });
});
