import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser } from '../support/browser.ts';
import { start } from '../support/harness.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
let browser: Browser;
beforeAll(async () => {
  app = await startHttpApp();
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await app?.close();
});

/** A right-to-left override left open, as a tool's error message or a cancel's reason may carry one. */
const RLO = 'quota \u202eexceeded';

/**
 * Whether a word of the page's own text in `selector` is drawn left to right, its first letter left of its
 * last, as it is unless text before it reversed the line.
 */
function leftToRight(page: Page, selector: string, word: string): Promise<boolean> {
  return page.$eval(selector, (element, word) => {
    const walker = element.ownerDocument.createTreeWalker(element, 4 /* NodeFilter.SHOW_TEXT */);
    let text = walker.nextNode();
    while (text && !text.textContent!.includes(` ${word} `)) text = walker.nextNode();
    const i = text!.textContent!.indexOf(` ${word} `) + 1;
    const letter = (at: number) => {
      const range = element.ownerDocument.createRange();
      range.setStart(text!, at);
      range.setEnd(text!, at + 1);
      return range.getBoundingClientRect().left;
    };
    return letter(i) < letter(i + word.length - 1);
  }, word);
}

describe('the run page with text that turns the writing direction', () => {
  it("a reason or a cancel with a right-to-left override does not reverse the page's own words after it (the step, the cost)", { timeout: 120_000 }, async () => {
    // A worker holds its message (as in a step): the cancel stays requested, shown beside the running run.
    await start(app.deps, 'copy the rows', 'bidi-1');
    expect(await app.runtime.queue.forRun('bidi-1').receive({ visibilityMs: 600_000 })).toHaveLength(1);
    expect((await app.api('/runs/bidi-1/cancel', { method: 'POST', body: JSON.stringify({ by: 'ops@example.com', reason: RLO }) })).status).toBe(200);
    const page = await browser.newPage();
    await page.goto(`${app.url}/inspect?token=${API_TOKEN}`);
    await page.goto(`${app.url}/inspect/runs/bidi-1`);
    expect(await page.textContent('#cancel-requested')).toContain(RLO);
    expect(await leftToRight(page, '#cancel-requested', 'applied')).toBe(true);

    // Applied (no worker holds this one's message, so the cancel applies itself): the reason is in the
    // status line, before the step and the cost.
    await start(app.deps, 'copy the rows', 'bidi-2');
    expect((await app.api('/runs/bidi-2/cancel', { method: 'POST', body: JSON.stringify({ by: 'ops@example.com', reason: RLO }) })).status).toBe(200);
    await page.goto(`${app.url}/inspect/runs/bidi-2`);
    expect(await page.textContent('#status')).toBe('cancelled');
    expect(await page.textContent('#reason')).toContain(RLO);
    expect(await leftToRight(page, 'p.meta', 'estimated')).toBe(true);
  });
});
