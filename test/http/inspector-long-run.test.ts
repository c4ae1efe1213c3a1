import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { costText, runCost } from '../../lib/llm/cost.ts';
import { RUN_PAGE_CHECKPOINTS } from '../../lib/http/inspector-pages.ts';
import { startHttpApp } from '../support/http-app.ts';
import { countRecordsRead, writeLongRun } from '../support/long-run.ts';

const STEPS = 1_250;
let app: Awaited<ReturnType<typeof startHttpApp>>;
let counted: ReturnType<typeof countRecordsRead> | undefined;
beforeAll(async () => {
  app = await startHttpApp();
  await writeLongRun(app.runtime.store, 'long', STEPS, { agent: app.deps.agent.name });
}, 60_000);
afterAll(async () => { await app?.close(); });
afterEach(() => { counted?.restore(); counted = undefined; });

const rows = (page: string) => [...page.matchAll(/<tr class="checkpoint" data-version="(\d+)">/g)].map((m) => Number(m[1]));

describe("the inspector's pages of a long run read the records they show", () => {
  it('the run page: its newest checkpoints, their steps\' records alone, the whole run\'s cost; older pages a link away', async () => {
    counted = countRecordsRead();
    const page = await (await app.api('/inspect/runs/long')).text();
    // The bounded read (steps 1101-1250, after the summaries of 11 blocks) and the rest of the page's
    // steps, 1051-1100: not 1,250.
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 50 }]);
    expect(rows(page)).toEqual(Array.from({ length: RUN_PAGE_CHECKPOINTS }, (_, i) => STEPS + 2 - RUN_PAGE_CHECKPOINTS + i));
    // Every step of the page has its result, from the record read for it.
    expect(page).toContain('ok: wrote row 1051<');
    expect(page).toContain('ok: wrote row 1250<');
    expect(page).not.toContain('wrote row 1050<');
    expect([...page.matchAll(/<rect /g)]).toHaveLength(RUN_PAGE_CHECKPOINTS);
    const whole = decodeState((await app.runtime.store.load('long'))!);
    expect(page).toContain(`estimated cost ${costText(runCost(whole, 'claude-sonnet-4-5'))}`);
    counted.restore();

    const older = /<a id="older" href="([^"]+)">/.exec(page)?.[1]?.replaceAll('&amp;', '&');
    expect(older).toBe(`/inspect/runs/long?cursor=${STEPS + 2 - RUN_PAGE_CHECKPOINTS}`);
    counted = countRecordsRead();
    const before = await (await app.api(older!)).text();
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: RUN_PAGE_CHECKPOINTS }]);
    expect(rows(before)).toEqual(Array.from({ length: RUN_PAGE_CHECKPOINTS }, (_, i) => STEPS + 2 - 2 * RUN_PAGE_CHECKPOINTS + i));
    expect(before).toContain('ok: wrote row 851<');
    expect(before).toContain('ok: wrote row 1050<');
    expect(before).toContain('<a id="newest" href="/inspect/runs/long">newest</a>');
  });

  it('a step page reads that step\'s record alone', async () => {
    counted = countRecordsRead();
    const page = await app.api('/inspect/runs/long/steps/5');
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<pre id="output">wrote row 5</pre>');
    expect(counted.reads()).toEqual([{ method: 'load', records: 150 }, { method: 'records', records: 1 }]);
    expect(await (await app.api('/inspect/runs/long/steps/1250')).text()).toContain('<pre id="output">wrote row 1250</pre>');
    const past = await app.api(`/inspect/runs/long/steps/${STEPS + 1}`);
    expect(past.status).toBe(404);
    expect(await past.text()).toContain(`Run long has ${STEPS} completed steps; step ${STEPS + 1} has no record.`);
  });
});
