import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { summariesDue } from '../../lib/core/condensed.ts';
import { blockCost } from '../../lib/llm/cost.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';
import { startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

/**
 * The inspector's list of runs read each run whole to show its head and cost: a page of runs of thousands
 * of steps took seconds. It reads what a resume reads; the cost of a run past its first condensed block
 * (after step 200) is then marked approximate where its summaries were written without their records' cost
 * (by code before summary format 2).
 */
describe("the inspector's list of runs", () => {
  it('reads each run as a resume does, and marks the cost of a run past its first condensed block as approximate', async () => {
    const store = app.runtime.store;
    const long = stateAfter('long-run', 230);
    await store.create(long, META);
    // One more step past 200: its checkpoint writes the first block's summary, which the bounded read takes in place of its records.
    const record = recordFor('long-run', 231);
    const next = completeStep(long, record, 9_000);
    await store.commit({ runId: 'long-run', expectedVersion: 1, state: next, appended: record, summaries: summariesDue(next), ...META });
    await store.create(stateAfter('short-run', 3), META);
    // The same, its summary written as today's code writes it, with its records' cost: exact, no ≈.
    const costed = stateAfter('costed-run', 230);
    await store.create(costed, META);
    const costedNext = completeStep(costed, recordFor('costed-run', 231), 9_000);
    await store.commit({ runId: 'costed-run', expectedVersion: 1, state: costedNext, appended: recordFor('costed-run', 231), summaries: summariesDue(costedNext, blockCost), ...META });

    const load = store.load.bind(store);
    const reads: { runId: string; options: unknown }[] = [];
    store.load = async (runId, options) => { reads.push({ runId, options }); return load(runId, options); };
    try {
      const page = await (await app.api('/inspect')).text();
      // listRuns reads a live run's head and last record (afterStep) for what it needs; the page's own reads:
      const whole = reads.filter((r) => ['long-run', 'short-run'].includes(r.runId) && !(r.options as { afterStep?: number } | undefined)?.afterStep);
      expect(whole.map((r) => r.options)).toEqual([{ recent: true }, { recent: true }]);
      expect(reads.filter((r) => r.runId === 'costed-run' && !(r.options as { afterStep?: number } | undefined)?.afterStep).map((r) => r.options)).toEqual([{ recent: true }]);
      expect(page).toMatch(/long-run<\/a>.*?<td>231<\/td>\n<td>[^<]*<\/td><td>≈ \$0\.0000<\/td>/s);
      expect(page).toMatch(/short-run<\/a>.*?<td>3<\/td>\n<td>[^<]*<\/td><td>\$0\.0000<\/td>/s);
      expect(page).toMatch(/costed-run<\/a>.*?<td>231<\/td>\n<td>[^<]*<\/td><td>\$0\.0000<\/td>/s);
      expect(page).toContain('<p id="approximate">≈:');
    } finally {
      store.load = load;
    }
  });

  it('says whose each run is: agents sharing the file list their runs on one page', async () => {
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'own-run' }) })).status).toBe(201);
    await app.runtime.store.create({ ...newState('cleanup-run'), agent: 'cleanup-tables' }, META);
    const page = await (await app.api('/inspect')).text();
    expect(page).toContain('<th>run</th><th>agent</th><th>status</th>');
    expect(page).toContain('cleanup-run</a></td><td class="agent">cleanup-tables</td>');
    expect(page).toContain(`own-run</a></td><td class="agent">${app.deps.agent.name}</td>`);
  });

  it('shows the runs of one status (?status=waiting: those waiting for an answer), paging within it, and refuses an unknown one', async () => {
    const store = app.runtime.store;
    for (const n of [1, 2, 3]) await store.create({ ...newState(`waiting-${n}`), status: 'waiting' }, META);
    await store.create({ ...newState('done-run'), status: 'completed' }, META);
    const page = await (await app.api('/inspect?status=waiting')).text();
    const listed = [...page.matchAll(/<a href="\/inspect\/runs\/([^"]+)">/g)].map((m) => m[1]);
    expect(listed.sort()).toEqual(['waiting-1', 'waiting-2', 'waiting-3']);
    // The filter is a link per status, the one shown in bold.
    expect(page).toContain('<a href="/inspect">all</a> · <a href="/inspect?status=running">running</a> · <b>waiting</b>');
    // A page of two: the link to the rest keeps the status.
    const first = await (await app.api('/inspect?status=waiting&limit=2')).text();
    const older = /<a id="older" href="([^"]+)">/.exec(first)?.[1]?.replaceAll('&amp;', '&');
    expect(older).toMatch(/&status=waiting$/);
    const rest = await (await app.api(older!)).text();
    expect([...rest.matchAll(/<a href="\/inspect\/runs\/([^"]+)">/g)]).toHaveLength(1);
    const unknown = await app.api('/inspect?status=pending');
    expect(unknown.status).toBe(400);
    expect(await unknown.text()).toContain('status is one of running, waiting, completed, failed, capped, over-budget, cancelled');
  });
});
