import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { startRun } from '../../lib/engine/start.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { localSigningKey } from '../../lib/waits/signing-key.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, drain, loadState, tempDb, workerProcess } from '../support/harness.ts';
import { startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const fork = (runId: string, fromStep: string) => app.api(`/inspect/runs/${runId}/fork`, {
  method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ fromStep }).toString(),
});

describe("the inspector's fork form", () => {
  it('reads the step as digits only, as GET /runs/:id/steps/:step does: "" is not step 0, nor " 1", "0x1", "1e0" step 1', async () => {
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'insp-f' }) })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('insp-f'))!).step).toBe(1);
    const runs = async () => (await app.runtime.store.list({ limit: 100 })).map((r) => r.runId).sort();
    const before = await runs();

    for (const written of ['', ' 1', '0x1', '1e0', '1.0', '-1', '+1']) {
      const refused = await fork('insp-f', written);
      expect(refused.status, JSON.stringify(written)).toBe(400);
      const page = await refused.text();
      expect(page, JSON.stringify(written)).toContain('The step to fork from is a whole number from 0, in digits only; got');
      expect(page, JSON.stringify(written)).toContain(JSON.stringify(written).replace(/"/g, '&quot;'));
    }
    // A body that does not parse as the multipart form it names: the same page, not a 500.
    const unparsed = await app.api('/inspect/runs/insp-f/fork', { method: 'POST', redirect: 'manual', headers: { 'content-type': 'multipart/form-data' }, body: 'fromStep=1' });
    expect(unparsed.status).toBe(400);
    expect(await unparsed.text()).toContain('The step to fork from is a whole number from 0, in digits only; got none');
    expect(await runs()).toEqual(before);

    const forked = await fork('insp-f', '1');
    expect(forked.status).toBe(303);
    expect(forked.headers.get('location')).toMatch(/^\/inspect\/runs\/insp-f-fork-1-[0-9a-f]+$/);
    // The fork's page says where it came from, with a link there, as status, show and history do.
    const page = await (await app.api(forked.headers.get('location')!)).text();
    expect(page).toMatch(/<p id="forked-from">forked from <a href="\/inspect\/runs\/insp-f">insp-f<\/a> after its step 1 \(version \d+\)<\/p>/);
    expect(await (await app.api('/inspect/runs/insp-f')).text()).not.toContain('forked-from');
  });
});

/**
 * The Fork and Retry forms had no step cap or budget: a capped run forked at its last step (the form's
 * default) and an over-budget run retried were always refused, asking for a cap or a budget the form could
 * not take. They read them as `stepwise fork` and `retry` read --step-cap, --budget-tokens and --budget-usd.
 */
describe("the inspector's Fork and Retry forms take a step cap and a budget", () => {
  let db: ReturnType<typeof tempDb>;
  let worker: ReturnType<typeof workerProcess>;
  let clock: ManualClock;
  let http: ReturnType<typeof createHttpApp>;
  beforeAll(() => {
    db = tempDb();
    clock = new ManualClock();
    // Five rows, 120 tokens a step, then done; answered by a model with a price, so a dollar budget can be checked.
    const script = (step: number): ModelReply => ({ ...writeRowsScript(5)(step), model: 'claude-haiku-4-5' });
    worker = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(script), clock, workerId: 'worker-A' });
    http = createHttpApp({
      store: worker.runtime.store, blobs: worker.runtime.blobs, queue: worker.runtime.queue, clock, workerId: 'api', codeVersion: 'test',
      log: worker.deps.log, agent: worker.deps.agent, signingKey: localSigningKey(join(db.path, '..', 'signing.key')),
    });
  });
  afterAll(() => {
    worker?.runtime.close();
    db?.cleanup();
  });

  const post = (path: string, fields: [string, string][], headers: Record<string, string> = {}) => http.request(`/inspect/runs/${path}`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(fields).toString(),
  });
  const work = () => drain(worker.deps, worker.runtime, clock);
  const state = (runId: string) => loadState(worker.runtime, runId);

  it('a capped run forked at its last step with a step cap, and retried with a higher one, continues', async () => {
    await startRun(worker.deps, { goal: 'write the rows', runId: 'capped', stepCap: 2 });
    await work();
    expect(await state('capped')).toMatchObject({ status: 'capped', step: 2 });
    const page = await (await http.request('/inspect/runs/capped')).text();
    // Both forms have the fields, the retry's cap showing what it raises to when left empty.
    expect(page).toMatch(/<form method="post" action="\/inspect\/runs\/capped\/fork">.*name="stepCap" min="1" step="1" placeholder="2">.*name="budgetTokens"[^>]*placeholder="none">.*name="budgetUsd"[^>]*placeholder="none">.*<\/form>/s);
    expect(page).toMatch(/<form method="post" action="\/inspect\/runs\/capped\/retry"><label>step cap <input type="number" name="stepCap" min="1" step="1" placeholder="12">.*name="budgetTokens".*name="budgetUsd".*<button id="retry"/s);

    // The form's default, its last step, with the parent's cap: no step to take, and the page says which field.
    const noStep = await post('capped/fork', [['fromStep', '2']]);
    expect(noStep.status).toBe(409);
    expect(await noStep.text()).toContain('a step cap of 2 leaves a fork from step 2 of run capped no step to take: give it a step cap above 2');
    // As a browser sends the form: the empty budget fields are not given.
    const forked = await post('capped/fork', [['fromStep', '2'], ['stepCap', '4'], ['budgetTokens', ''], ['budgetUsd', '']]);
    expect(forked.status).toBe(303);
    const forkId = forked.headers.get('location')!.replace('/inspect/runs/', '');
    expect(forkId).toMatch(/^capped-fork-2-/);
    expect(await state(forkId)).toMatchObject({ status: 'running', step: 2, stepCap: 4 });
    expect((await state(forkId)).budget).toBeUndefined();

    // 3, not the 12 a retry with no cap raises it to.
    const retried = await post('capped/retry', [['stepCap', '3'], ['budgetTokens', ''], ['budgetUsd', '']]);
    expect(retried.status).toBe(303);
    expect(retried.headers.get('location')).toBe('/inspect/runs/capped');
    expect(await state('capped')).toMatchObject({ status: 'running', step: 2, stepCap: 3 });
    await work();
    expect(await state('capped')).toMatchObject({ status: 'capped', step: 3, stepCap: 3 });
    expect(await state(forkId)).toMatchObject({ status: 'capped', step: 4, stepCap: 4 });
  });

  it('an over-budget run retried with a higher budget continues; a fork takes a budget too', async () => {
    await startRun(worker.deps, { goal: 'write the rows', runId: 'spent', budget: { tokens: 300 } });
    await work();
    expect(await state('spent')).toMatchObject({ status: 'over-budget', step: 3, reason: 'token budget of 300 reached: 360 tokens used' });
    expect(await (await http.request('/inspect/runs/spent')).text()).toMatch(/action="\/inspect\/runs\/spent\/retry">.*name="budgetTokens" min="1" step="1" placeholder="300">/s);

    const again = await post('spent/retry', []);
    expect(again.status).toBe(409);
    expect(await again.text()).toContain('would stop again at once: token budget of 300 reached: 360 tokens used; raise it with --budget-tokens or --budget-usd (in the API, &quot;budget&quot;: {&quot;tokens&quot;, &quot;usd&quot;}; in the inspector, the token or dollar budget)');
    const overFork = await post('spent/fork', [['fromStep', '3']]);
    expect(overFork.status).toBe(409);
    expect(await overFork.text()).toContain('would stop at once: token budget of 300 reached: 360 tokens used; give it a budget above that');

    const forked = await post('spent/fork', [['fromStep', '3'], ['budgetTokens', '2000'], ['budgetUsd', '2.5']]);
    expect(forked.status).toBe(303);
    const forkId = forked.headers.get('location')!.replace('/inspect/runs/', '');
    expect(await state(forkId)).toMatchObject({ status: 'running', step: 3, budget: { tokens: 2000, usd: 2.5 } });

    const retried = await post('spent/retry', [['stepCap', ''], ['budgetTokens', '1000'], ['budgetUsd', '']]);
    expect(retried.status).toBe(303);
    expect(await state('spent')).toMatchObject({ status: 'running', step: 3, budget: { tokens: 1000 } });
    await work();
    expect(await state('spent')).toMatchObject({ status: 'completed', step: 5, budget: { tokens: 1000 } });
    expect(await state(forkId)).toMatchObject({ status: 'completed', step: 5, budget: { tokens: 2000, usd: 2.5 } });
  });

  it('refuses a cap or budget that is not one with a 400 naming the field, changing nothing; a form from another site stays refused', async () => {
    await startRun(worker.deps, { goal: 'write the rows', runId: 'typo', stepCap: 1 });
    await work();
    const before = (await worker.runtime.store.load('typo'))!.version;
    const runs = async () => (await worker.runtime.store.list({ limit: 100 })).map((r) => r.runId).sort();
    const listed = await runs();
    const whole = ['0', '-1', '1.5', '1e3', ' 3', '3 ', '0x10', 'ten', '9007199254740993'];
    const cases: [string, string, string[]][] = [
      ['stepCap', 'step cap', whole],
      ['budgetTokens', 'token budget', whole],
      ['budgetUsd', 'dollar budget', ['0', '0.0', '-1', '1e-6', '$5', ' 5', '5,00', 'Infinity', '.', '9'.repeat(400)]],
    ];
    for (const [name, label, values] of cases) {
      for (const value of values) {
        for (const [path, fields] of [['typo/retry', []], ['typo/fork', [['fromStep', '1']]]] as [string, [string, string][]][]) {
          const refused = await post(path, [...fields, [name, value]]);
          const what = `${path} ${name}=${JSON.stringify(value)}`;
          expect(refused.status, what).toBe(400);
          const page = await refused.text();
          expect(page, what).toContain(`The ${label} (${name}) is `);
          expect(page, what).toContain(`got ${JSON.stringify(value).replace(/"/g, '&quot;')}.`);
          expect(page, what).toContain('Nothing was changed.');
        }
      }
    }
    const twice = await post('typo/retry', [['stepCap', '5'], ['stepCap', '6']]);
    expect(twice.status).toBe(400);
    expect(await twice.text()).toContain('The step cap (stepCap) is a whole number from 1, in digits only, or left empty for the run&#39;s own; got it more than once.');
    // Every wrong field is named at once.
    const both = await (await post('typo/retry', [['budgetTokens', '1k'], ['budgetUsd', '1e-6']])).text();
    expect(both).toContain('The token budget (budgetTokens) is a whole number from 1');
    expect(both).toContain('The dollar budget (budgetUsd) is a number of dollars above 0, in plain decimals (0.000001, not 1e-6)');
    // The page's own check on where a form came from still comes first.
    const crossSite = await post('typo/retry', [['stepCap', '5']], { 'sec-fetch-site': 'same-site' });
    expect(crossSite.status).toBe(403);
    expect((await worker.runtime.store.load('typo'))!.version).toBe(before);
    expect(await runs()).toEqual(listed);
    expect(await state('typo')).toMatchObject({ status: 'capped', step: 1, stepCap: 1 });

    // The same values, written right, are taken.
    expect((await post('typo/retry', [['stepCap', '2'], ['budgetTokens', '5000'], ['budgetUsd', '.5']])).status).toBe(303);
    expect(await state('typo')).toMatchObject({ status: 'running', stepCap: 2, budget: { tokens: 5000, usd: 0.5 } });
  });
});
