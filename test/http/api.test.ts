import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { MAX_BODY_BYTES } from '../../lib/http/app.ts';
import { summariesDue } from '../../lib/core/condensed.ts';
import type { RunState } from '../../lib/core/state.ts';
import { shapeResult } from '../../lib/core/result.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { blockCost, estimateCost, runCost } from '../../lib/llm/cost.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';
import { APPROVER } from '../support/wait-agent.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const json = async (response: Response) => ({ status: response.status, body: await response.json() as any });

/**
 * A JSON POST past the body limit through node:http, so the answer is read however the server reads:
 * with a Content-Length over the limit and a first part of the body (the rest never sent: the answer
 * comes from the header alone), or chunked, a little over the limit in all.
 */
function postOverLimit(url: string, withLength: boolean): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { authorization: `Bearer ${API_TOKEN}`, 'content-type': 'application/json' };
    if (withLength) headers['content-length'] = 2 * MAX_BODY_BYTES;
    const req = request(url, { method: 'POST', headers }, (response) => {
      let text = '';
      response.setEncoding('utf8').on('data', (chunk: string) => { text += chunk; }).on('end', () => {
        resolve({ status: response.statusCode!, body: JSON.parse(text) });
        req.destroy();
      });
    });
    req.on('error', reject);
    const chunk = 'x'.repeat(64 * 1024);
    if (withLength) req.write(chunk);
    else {
      for (let sent = 0; sent <= MAX_BODY_BYTES; sent += chunk.length) req.write(chunk);
      req.end();
    }
  });
}

describe('the JSON API', () => {
  it('wants the bearer token on every program route, and not on the approval pages', async () => {
    for (const path of ['/runs', '/runs/x', '/waits']) {
      const response = await fetch(`${app.url}${path}`);
      expect(response.status, path).toBe(401);
      expect((await response.json() as { error: string }).error).toContain('Bearer');
    }
    expect((await fetch(`${app.url}/runs`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await fetch(`${app.url}/approvals/garbage`)).status).toBe(400);
    expect((await fetch(`${app.url}/health`)).status).toBe(200);
  });

  it('starts a run idempotently on its run id, and explains a bad body', async () => {
    const first = await json(await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'api-1' }) }));
    expect(first).toMatchObject({ status: 201, body: { runId: 'api-1', created: true, version: 1 } });
    const again = await json(await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'api-1' }) }));
    expect(again).toEqual({ status: 200, body: { runId: 'api-1', created: false, version: 1 } });
    // The id reused with another goal or limits: refused by name, never taken for the run asked for.
    const other = await json(await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'other', runId: 'api-1', stepCap: 5 }) }));
    expect(other).toEqual({
      status: 409,
      body: {
        error: 'run api-1 already exists with another goal and stepCap: nothing changed, since a start sets them only on a new run; POST /runs/api-1/fork starts from its steps with another goal or limits, or use another runId',
        runId: 'api-1', created: false, version: 1, unapplied: ['goal', 'stepCap'],
      },
    });
    expect(decodeState((await app.runtime.store.load('api-1'))!).goal).toBe('copy the rows');
    const bad = [
      [{}, /^invalid request: goal: required \(string\)$/],
      [{ goal: 'x', extra: 1 }, /^invalid request: \(body\): unknown field "extra"$/],
      [{ goal: 'x', stepCap: -1 }, /stepCap/],
      [{ goal: '   ' }, /goal is empty/],
      [{ goal: 'x'.repeat(20_000) }, /bytes; the limit is/],
      [{ goal: 'x', runId: 'bad id!' }, /must match/],
      [{ goal: 'x', runId: '' }, /^run id "" must match/],
    ] as const;
    for (const [body, message] of bad) {
      const response = await json(await app.api('/runs', { method: 'POST', body: JSON.stringify(body) }));
      expect(response.status, JSON.stringify(body).slice(0, 40)).toBe(400);
      expect(response.body.error).toMatch(message);
    }
    const notJson = await json(await app.api('/runs', { method: 'POST', body: '{"goal":' }));
    expect(notJson.status).toBe(400);
    // An empty body with the JSON type reads as {}: refused for what it lacks, not as malformed JSON.
    expect(await json(await app.api('/runs', { method: 'POST' }))).toMatchObject({ status: 400, body: { error: 'invalid request: goal: required (string)' } });
    // A body past what any request takes is refused before it is read whole, with its length given or not.
    const over = { status: 413, body: { error: `the request body is over ${MAX_BODY_BYTES} bytes, the most any request takes` } };
    expect(await postOverLimit(`${app.url}/runs`, true)).toEqual(over);
    expect(await postOverLimit(`${app.url}/runs`, false)).toEqual(over);
    // A form or text body is not taken for an empty one (which would be refused for a "missing" goal).
    for (const type of ['application/x-www-form-urlencoded', 'text/plain']) {
      const wrongType = await json(await app.api('/runs', { method: 'POST', headers: { 'content-type': type }, body: type === 'text/plain' ? '{"goal":"x","runId":"api-text"}' : 'goal=x&runId=api-form' }));
      expect(wrongType).toEqual({ status: 415, body: { error: `send the body as JSON, with Content-Type: application/json (got "${type}")` } });
    }
    // JSON with a charset gets through to the body's own checks.
    const charset = await json(await app.api('/runs', { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-8' }, body: JSON.stringify({ goal: ' ' }) }));
    expect(charset).toMatchObject({ status: 400, body: { error: expect.stringMatching(/goal is empty/) } });
    expect((await app.runtime.store.list()).map((r) => r.runId)).toEqual(['api-1']);
  });

  it('reads a run and its history; an unknown run is a 404', async () => {
    const run = await json(await app.api('/runs/api-1'));
    expect(run).toMatchObject({ status: 200, body: { run: { runId: 'api-1', status: 'running', goal: 'copy the rows', version: 1, steps: 0 } } });
    const history = await json(await app.api('/runs/api-1/history'));
    expect(history.body.checkpoints).toHaveLength(1);
    expect((await app.api('/runs/nope')).status).toBe(404);
    expect((await app.api('/runs/nope/history')).status).toBe(404);
    expect((await app.api('/runs?status=bogus')).status).toBe(400);
    expect((await json(await app.api('/runs?status=running'))).body.runs.map((r: { runId: string }) => r.runId)).toEqual(['api-1']);
  });

  it('gives a run\'s estimated cost with the run, as show --json gives it: each step at its model\'s price, the rest at the model that answered last', async () => {
    const usage = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens, cacheWriteTokens: 0, cacheReadTokens: 0 });
    const first = stateAfter('api-cost', 1);
    // Step 1 by Opus 4.1 ($15 in, $75 out a million); 1M more input tokens (a DONE reply) at the model that answered last.
    const state = {
      ...first, agent: app.deps.agent.name, usage: usage(2_000_000, 1_000_000),
      steps: [{ ...first.steps[0]!, model: 'claude-opus-4-1', usage: usage(1_000_000, 1_000_000) }],
    };
    await app.runtime.store.create({ ...newState('api-cost'), agent: app.deps.agent.name }, META);
    await app.runtime.store.commit({ runId: 'api-cost', expectedVersion: 1, state, appended: state.steps[0]!, ...META });
    const { run } = (await json(await app.api('/runs/api-cost'))).body;
    const rest = estimateCost(usage(1_000_000, 0), 'claude-opus-4-1')!.usd;
    expect(run.cost).toEqual({ usd: 15 + 75 + rest, priced: true });
    expect(run.cost).toEqual((await json(await app.api('/runs/api-cost/steps/1'))).body.cost);
  });

  it('reads a long run as a resume does (its block summaries, whose costs the summaries carry, and the records after them), and gives what a full read gives', async () => {
    const store = app.runtime.store;
    const make = async (runId: string, priced: boolean) => {
      let state: RunState = { ...newState(runId), agent: app.deps.agent.name, stepCap: 1000 };
      await store.create(state, META);
      for (let n = 1; n <= 250; n++) {
        const record = { ...recordFor(runId, n), usage: { inputTokens: 1000 + n, outputTokens: 10, cacheWriteTokens: 0, cacheReadTokens: 0 }, model: n % 2 ? 'claude-sonnet-4-5' : 'claude-opus-4-1' };
        state = completeStep(state, record, 5_000 + n);
        const summaries = summariesDue(state, priced ? blockCost : undefined);
        await store.commit({ runId, expectedVersion: n, state, appended: record, ...(summaries.length ? { summaries } : {}), ...META });
      }
    };
    await make('api-condensed', true);
    await make('api-condensed-older', false);
    const load = store.load.bind(store);
    const reads: { runId: string; options: unknown; records: number }[] = [];
    store.load = async (runId, options) => {
      const stored = await load(runId, options);
      reads.push({ runId, options, records: stored?.steps.length ?? 0 });
      return stored;
    };
    try {
      for (const runId of ['api-condensed', 'api-condensed-older']) {
        const { run } = (await json(await app.api(`/runs/${runId}`))).body;
        const full = decodeState((await load(runId))!);
        expect(run).toMatchObject({ runId, step: 250, steps: 250, version: 251, lastStep: { step: 250 } });
        expect(run.cost.usd).toBeCloseTo(runCost(full, '').usd, 12);
        expect(run).not.toHaveProperty('condensed');
      }
      // The summaries with their cost: one bounded read. An older release's, without: read whole for an exact cost.
      expect(reads.filter((r) => r.runId === 'api-condensed').map((r) => [r.options, r.records])).toEqual([[{ recent: true }, 150]]);
      expect(reads.filter((r) => r.runId === 'api-condensed-older').map((r) => [r.options, r.records])).toEqual([[{ recent: true }, 150], [undefined, 250]]);
    } finally {
      store.load = load;
    }
  });

  it('gives a step\'s whole output from GET /runs/:id/steps/:n only when asked (?full=true), else its record with the excerpt, reading no blob', async () => {
    const whole = 'row written\n'.repeat(2_000);
    const shaped = shapeResult(whole, true);
    await app.runtime.blobs.put(shaped.blob!.ref, shaped.blob!.data);
    const record = { ...recordFor('api-output', 1), result: shaped.result };
    await app.runtime.store.create({ ...newState('api-output'), agent: app.deps.agent.name }, META);
    await app.runtime.store.commit({ runId: 'api-output', expectedVersion: 1, state: completeStep({ ...newState('api-output'), agent: app.deps.agent.name }, record, 5_000), appended: record, ...META });
    const get = app.runtime.blobs.get.bind(app.runtime.blobs);
    let reads = 0;
    app.runtime.blobs.get = async (ref) => { reads++; return get(ref); };
    try {
      const plain = (await json(await app.api('/runs/api-output/steps/1'))).body;
      expect(plain.record).toMatchObject({ step: 1, result: { ref: shaped.blob!.ref, bytes: whole.length } });
      expect(plain.record).not.toHaveProperty('output');
      expect(reads).toBe(0);
      const full = (await json(await app.api('/runs/api-output/steps/1?full=true'))).body;
      expect(full.record.output).toBe(whole);
      expect(reads).toBe(1);
    } finally {
      app.runtime.blobs.get = get;
    }
  });

  it('pages a run\'s history back in time with the next cursor: every checkpoint once, oldest first; a bad cursor is a 400', async () => {
    await app.runtime.store.create(newState('api-long'), META);
    for (let n = 1; n <= 6; n++) await app.runtime.store.commit({ runId: 'api-long', expectedVersion: n, state: stateAfter('api-long', n), appended: recordFor('api-long', n), ...META });
    const whole = (await json(await app.api('/runs/api-long/history'))).body;
    expect(whole.checkpoints.map((h: { version: number }) => h.version)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(whole.next).toBeUndefined();
    const pages: number[][] = [];
    let next: string | undefined;
    do {
      const page = (await json(await app.api(`/runs/api-long/history?limit=3${next ? `&cursor=${next}` : ''}`))).body as { checkpoints: { version: number }[]; next?: string };
      pages.push(page.checkpoints.map((h) => h.version));
      next = page.next;
    } while (next);
    expect(pages).toEqual([[5, 6, 7], [2, 3, 4], [1]]);
    for (const cursor of ['garbage', '0', '1e1', '-3']) {
      const bad = await json(await app.api(`/runs/api-long/history?cursor=${cursor}`));
      expect(bad.status, cursor).toBe(400);
      expect(bad.body.error).toMatch(/^invalid cursor/);
    }
    expect((await app.api('/runs/api-long/history?limit=0')).status).toBe(400);
    // Below the first version an existing run's page is empty, not an unknown run.
    expect(await json(await app.api('/runs/api-long/history?cursor=1'))).toEqual({ status: 200, body: { runId: 'api-long', checkpoints: [] } });
    expect((await app.api('/runs/nope/history?cursor=4')).status).toBe(404);

    // The inspector's run page, through its "older checkpoints" link: each checkpoint's row once.
    const rows: number[] = [];
    let href: string | undefined = '/inspect/runs/api-long?limit=3';
    let first = '';
    for (let n = 0; href && n < 10; n++) {
      const html = await (await app.api(href)).text();
      if (!n) first = html;
      rows.push(...[...html.matchAll(/<tr class="checkpoint" data-version="(\d+)">/g)].map((m) => Number(m[1])));
      href = /<a id="older" href="([^"]+)">older checkpoints<\/a>/.exec(html)?.[1]?.replaceAll('&amp;', '&');
    }
    expect(rows).toEqual([5, 6, 7, 2, 3, 4, 1]);
    expect(first).toContain('checkpoints 5-7 of 7');
    expect(first).not.toContain('id="newest"');
    // The chart shows the page's steps only: steps 4-6 on the first page.
    expect([...first.matchAll(/<title>step (\d+)/g)].map((m) => Number(m[1]))).toEqual([4, 5, 6]);
    const older = await (await app.api('/inspect/runs/api-long?cursor=2&limit=3')).text();
    expect(older).toContain('<a id="newest" href="/inspect/runs/api-long">newest</a>');
    expect((await app.api('/inspect/runs/api-long?cursor=garbage')).status).toBe(400);
    expect((await app.api('/inspect/runs/api-long?limit=0')).status).toBe(400);
    // A run of one page shows no paging line.
    expect(await (await app.api('/inspect/runs/api-1')).text()).not.toContain('class="pages"');
  });

  it('lists what is waiting and takes an authenticated answer from a program', async () => {
    await workVisible(app.deps, app.runtime);
    const waits = await json(await app.api('/waits'));
    expect(waits.body.waits).toMatchObject([{ runId: 'api-1', agent: app.deps.agent.name, kind: 'approval', approvers: [APPROVER] }]);
    const waitId = waits.body.waits[0].id as string;
    const outsider = await json(await app.api(`/runs/api-1/waits/${waitId}`, { method: 'POST', body: JSON.stringify({ decision: 'approve', by: 'mallory@example.com' }) }));
    expect(outsider).toMatchObject({ status: 403, body: { outcome: 'refused' } });
    expect((await app.api(`/runs/api-1/waits/${waitId}`, { method: 'POST', body: JSON.stringify({ decision: 'maybe', by: APPROVER }) })).status).toBe(400);
    // An answer for a wait the run is not in, while it waits for another: says which one it is in.
    const elsewhere = await json(await app.api('/runs/api-1/waits/not-this-wait', { method: 'POST', body: JSON.stringify({ decision: 'approve', by: APPROVER }) }));
    expect(elsewhere).toMatchObject({ status: 409, body: { outcome: 'not-waiting', status: 'waiting', current: waitId } });
    const answer = await json(await app.api(`/runs/api-1/waits/${waitId}`, { method: 'POST', body: JSON.stringify({ decision: 'approve', by: APPROVER, comment: 'scripted' }) }));
    expect(answer).toMatchObject({ status: 200, body: { outcome: 'resumed' } });
    const twice = await json(await app.api(`/runs/api-1/waits/${waitId}`, { method: 'POST', body: JSON.stringify({ decision: 'reject', by: APPROVER }) }));
    expect(twice).toMatchObject({ status: 409, body: { outcome: 'already-answered' } });
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('api-1'))!).status).toBe('completed');
    expect(app.dropped).toEqual(['api-1/step-3:old_rows']);
  });

  it('an answer after the wait timed out is told it expired (410), as the page and the CLI tell it, not that someone answered', async () => {
    const late = await startHttpApp();
    try {
      await json(await late.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'late-1' }) }));
      await workVisible(late.deps, late.runtime);
      const [wait] = (await json(await late.api('/waits'))).body.waits as { id: string; deadline: number }[];
      // The timer fires at the deadline: the run goes on with "timed out".
      late.clock.advance(3_600_000);
      await workVisible(late.deps, late.runtime);
      const after = await late.runtime.store.load('late-1');
      expect(decodeState(after!).steps[1]!.result.text).toContain('"timedOut":true');
      const answer = await json(await late.api(`/runs/late-1/waits/${wait!.id}`, { method: 'POST', body: JSON.stringify({ decision: 'approve', by: APPROVER }) }));
      expect(answer).toEqual({ status: 410, body: { error: `run late-1: the approval expired at ${new Date(wait!.deadline).toISOString()}; the run went on with "timed out", not this answer`, outcome: 'expired', runId: 'late-1', waitId: wait!.id, deadline: wait!.deadline } });
      expect((await late.runtime.store.load('late-1'))!.version).toBe(after!.version);
    } finally {
      await late.close();
    }
  });

  it('takes events: validated, kept, and matched to waiting runs', async () => {
    const accepted = await json(await app.api('/events', { method: 'POST', body: JSON.stringify({ type: 'order.paid', key: 'order-1', id: 'e-1', payload: { amount: 3 } }) }));
    expect(accepted).toMatchObject({ status: 202, body: { eventId: 'e-1', fresh: true, resumed: [] } });
    const redelivered = await json(await app.api('/events', { method: 'POST', body: JSON.stringify({ type: 'order.paid', key: 'order-1', id: 'e-1' }) }));
    expect(redelivered.body.fresh).toBe(false);
    expect((await app.runtime.events.find('order.paid', 'order-1', 0)).map((e) => e.payload)).toEqual([{ amount: 3 }]);
    // A payload nested 3,000 deep, written as text (found by the fuzzer: it overflowed a recursive walk, a 500).
    const deep = await json(await app.api('/events', { method: 'POST', body: `{"type":"t","key":"k","payload":${'['.repeat(3000)}1${']'.repeat(3000)}}` }));
    expect(deep.status).toBe(400);
    expect(deep.body.error).toMatch(/nested deeper than 64/);
    for (const body of [{ type: 'has space', key: 'k' }, { type: 't' }, { type: 't', key: 'k', payload: 'x'.repeat(300 * 1024) }]) {
      const response = await json(await app.api('/events', { method: 'POST', body: JSON.stringify(body) }));
      expect(response.status, JSON.stringify(body).slice(0, 40)).toBe(400);
      expect(typeof response.body.error).toBe('string');
    }
    expect((await app.api('/no/such/route')).status).toBe(404);
  });

  it('says a run written by newer code cannot be read here, and what it needs (409), changing nothing', async () => {
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'from the future', runId: 'api-newer' }) })).status).toBe(201);
    const { head } = app.runtime.db.prepare("SELECT head FROM checkpoints WHERE run_id = 'api-newer' AND version = 1").get() as { head: string };
    app.runtime.db.prepare("UPDATE checkpoints SET head = ? WHERE run_id = 'api-newer' AND version = 1").run(JSON.stringify({ ...JSON.parse(head), formatVersion: 9 }));
    const run = await json(await app.api('/runs/api-newer'));
    expect(run).toMatchObject({ status: 409, body: { needs: 'head format 9', error: expect.stringContaining('needs code that reads head format 9') } });
    expect((await app.runtime.store.load('api-newer'))).toMatchObject({ version: 1, status: 'running' });
    // The run list says so on that run alone; the inspector's list too (escaped like everything there).
    const list = await json(await app.api('/runs'));
    const needs = (list.body.runs as { runId: string; needs?: string }[]).filter((r) => r.needs);
    expect(needs).toEqual([expect.objectContaining({ runId: 'api-newer', status: 'running', needs: 'head format 9' })]);
    const page = await (await app.api('/inspect')).text();
    expect(page).toMatch(/api-newer<\/a><\/td><td class="agent">[^<]+<\/td><td class="status">running <span class="needs">\(needs head format 9\)<\/span>/);
    // Its own page, and an answer posted from one, are pages that say why, not the API's JSON.
    for (const response of [await app.api('/inspect/runs/api-newer'), await app.api('/inspect/runs/api-newer/waits/w1', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'decision=approve' })]) {
      expect(response.status).toBe(409);
      expect(response.headers.get('content-type')).toMatch(/^text\/html/);
      expect(await response.text()).toMatch(/Written by newer code[\s\S]*needs code that reads head format 9/);
    }
    // A checkpoint no code can read: a page that says which and why.
    app.runtime.db.prepare("UPDATE checkpoints SET head = ? WHERE run_id = 'api-newer' AND version = 1").run(JSON.stringify({ ...JSON.parse(head), usage: null }));
    const unreadable = await app.api('/inspect/runs/api-newer');
    expect(unreadable.status).toBe(500);
    expect(unreadable.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await unreadable.text()).toMatch(/Unreadable checkpoint[\s\S]*checkpoint 1 of run api-newer is unreadable/);
    expect((await app.runtime.store.load('api-newer'))).toMatchObject({ version: 1, status: 'running' });
  });

  it('pages through runs and waits with the next cursor: every run once; a bad cursor is a 400', async () => {
    for (let i = 0; i < 5; i++) {
      expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'page me', runId: `page-${i}` }) })).status).toBe(201);
    }
    const all = (await json(await app.api('/runs?limit=1000'))).body as { runs: { runId: string }[]; next?: string };
    expect(all.next).toBeUndefined();
    const paged: string[] = [];
    let next: string | undefined;
    do {
      const page = (await json(await app.api(`/runs?limit=2${next ? `&cursor=${next}` : ''}`))).body as { runs: { runId: string }[]; next?: string };
      expect(page.runs.length).toBeLessThanOrEqual(2);
      paged.push(...page.runs.map((r) => r.runId));
      next = page.next;
    } while (next);
    expect(paged).toEqual(all.runs.map((r) => r.runId));
    expect(paged.filter((id) => id.startsWith('page-')).sort()).toEqual(['page-0', 'page-1', 'page-2', 'page-3', 'page-4']);

    await workVisible(app.deps, app.runtime);
    const waits = (await json(await app.api('/waits?limit=1000'))).body as { waits: { runId: string }[] };
    const waitsPaged: string[] = [];
    next = undefined;
    do {
      const page = (await json(await app.api(`/waits?limit=2${next ? `&cursor=${next}` : ''}`))).body as { waits: { runId: string }[]; next?: string };
      waitsPaged.push(...page.waits.map((w) => w.runId));
      next = page.next;
    } while (next);
    expect(waitsPaged).toEqual(waits.waits.map((w) => w.runId));
    expect(waitsPaged.filter((id) => id.startsWith('page-')).sort()).toEqual(['page-0', 'page-1', 'page-2', 'page-3', 'page-4']);

    for (const cursor of ['garbage', Buffer.from('[1]').toString('base64url'), Buffer.from('{"a":1}').toString('base64url')]) {
      const bad = await json(await app.api(`/runs?cursor=${cursor}`));
      expect(bad.status, cursor).toBe(400);
      expect(bad.body.error).toMatch(/^invalid cursor/);
    }
    expect((await app.api('/waits?limit=0')).status).toBe(400);
    // A page size is a query string: the reason names it and what came, not zod's "received NaN".
    for (const [path, given] of [['/runs?limit=abc', 'abc'], ['/waits?limit=5000', '5000'], ['/runs?limit=1.5', '1.5'], ['/runs?limit=', '']] as const) {
      const bad = await json(await app.api(path));
      expect(bad.status, path).toBe(400);
      expect(bad.body.error, path).toBe(`invalid request: limit: a whole number from 1 to 1000, got ${JSON.stringify(given)}`);
    }
    expect((await json(await app.api('/runs?limit=1000'))).status).toBe(200);
    // A misspelt parameter is named, where it was ignored and the answer (every run) looked like what was asked for.
    for (const [path, unknown] of [['/runs?staus=waiting', 'query parameter "staus"'], ['/waits?limit=5&page=2', 'query parameter "page"'], ['/runs/page-0/history?limt=1', 'query parameter "limt"'], ['/runs?a=1&b=2', 'query parameters "a", "b"']] as const) {
      const bad = await json(await app.api(path));
      expect(bad, path).toMatchObject({ status: 400, body: { error: `invalid request: (query): unknown ${unknown}` } });
    }

    // The inspector's list, page by page through its "older runs" link.
    const shown: string[] = [];
    let href: string | undefined = '/inspect?limit=2';
    for (let pages = 0; href && pages < 100; pages++) {
      const html = await (await app.api(href)).text();
      shown.push(...[...html.matchAll(/<a href="\/inspect\/runs\/([^"]+)">/g)].map((m) => decodeURIComponent(m[1]!)));
      href = /<a id="older" href="([^"]+)">older runs<\/a>/.exec(html)?.[1]?.replaceAll('&amp;', '&');
    }
    expect(shown).toEqual(all.runs.map((r) => r.runId));
    const badPage = await app.api('/inspect?cursor=garbage');
    expect(badPage.status).toBe(400);
    expect(await badPage.text()).toContain('invalid cursor');
    expect((await app.api('/inspect?limit=0')).status).toBe(400);
  });

  it('refuses a start with the id of another agent\'s run sharing the file (409), as one of another goal, changing nothing', async () => {
    await app.runtime.store.create({ ...newState('api-theirs', 'drop the old tables'), agent: 'cleanup-tables' }, META);
    const taken = await json(await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'drop the old tables', runId: 'api-theirs' }) }));
    expect(taken).toEqual({
      status: 409,
      body: {
        error: `run api-theirs belongs to agent "cleanup-tables", not "${app.deps.agent.name}": use that agent's module or another run id; if "cleanup-tables" was renamed to "${app.deps.agent.name}", add formerNames: ["cleanup-tables"] to its defineAgent`,
        runId: 'api-theirs', agent: 'cleanup-tables',
      },
    });
    expect(await app.runtime.store.history('api-theirs')).toHaveLength(1);
    expect(app.runtime.db.prepare("SELECT count(*) AS n FROM queue WHERE run_id = 'api-theirs'").get()).toEqual({ n: 0 });
    expect(decodeState((await app.runtime.store.load('api-theirs'))!)).toMatchObject({ agent: 'cleanup-tables', status: 'running' });
  });

  it('lists the waits of runs it cannot read as such, with what they need or why, where one failed the whole list', async () => {
    for (const runId of ['waits-ok', 'waits-newer', 'waits-unreadable']) {
      expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'drop the old rows', runId }) })).status).toBe(201);
    }
    await workVisible(app.deps, app.runtime);
    const edit = (runId: string, change: (head: Record<string, unknown>) => Record<string, unknown>) => {
      const { version, head } = app.runtime.db.prepare('SELECT version, head FROM checkpoints WHERE run_id = ? ORDER BY version DESC LIMIT 1').get(runId) as { version: number; head: string };
      app.runtime.db.prepare('UPDATE checkpoints SET head = ? WHERE run_id = ? AND version = ?').run(JSON.stringify(change(JSON.parse(head) as Record<string, unknown>)), runId, version);
      return version;
    };
    const newer = edit('waits-newer', (head) => ({ ...head, formatVersion: 9 }));
    const unreadable = edit('waits-unreadable', (head) => ({ ...head, usage: null }));
    const listed = await json(await app.api('/waits?limit=1000'));
    expect(listed.status).toBe(200);
    const byRun = new Map((listed.body.waits as { runId: string }[]).map((w) => [w.runId, w]));
    expect(byRun.get('waits-ok')).toMatchObject({ kind: 'approval', approvers: [APPROVER], agent: app.deps.agent.name });
    expect(byRun.get('waits-newer')).toEqual({ runId: 'waits-newer', agent: app.deps.agent.name, version: newer, needs: 'head format 9' });
    expect(byRun.get('waits-unreadable')).toEqual({ runId: 'waits-unreadable', agent: app.deps.agent.name, version: unreadable, error: expect.stringContaining('unreadable') });
  });

  it('reads each waiting run once for GET /waits: the head the list checks is the one whose wait it gives', async () => {
    for (const runId of ['once-0', 'once-1', 'once-2']) {
      expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'drop the old rows', runId }) })).status).toBe(201);
    }
    await workVisible(app.deps, app.runtime);
    const store = app.deps.store;
    const load = store.load.bind(store);
    const loads = new Map<string, number>();
    store.load = (runId, options) => { loads.set(runId, (loads.get(runId) ?? 0) + 1); return load(runId, options); };
    try {
      const listed = await json(await app.api('/waits?limit=1000'));
      const once = (listed.body.waits as { runId: string; kind: string; tool: string }[]).filter((w) => w.runId.startsWith('once-'));
      expect(once.map((w) => [w.runId, w.kind, w.tool]).sort()).toEqual([['once-0', 'approval', 'request_approval'], ['once-1', 'approval', 'request_approval'], ['once-2', 'approval', 'request_approval']]);
      expect([...loads].filter(([runId]) => runId.startsWith('once-')).sort()).toEqual([['once-0', 1], ['once-1', 1], ['once-2', 1]]);
    } finally { store.load = load; }
  });
});
