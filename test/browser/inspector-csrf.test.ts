import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { launchBrowser } from '../support/browser.ts';
import { start } from '../support/harness.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
let browser: Browser;
/** Another server on the same host, another port: same-site to the browser, so SameSite=Strict lets its forms carry the cookie. */
let neighbour: Server;
let neighbourForm = '';

beforeAll(async () => {
  app = await startHttpApp();
  neighbour = createServer((_req, res) => {
    res.setHeader('content-type', 'text/html');
    res.end(neighbourForm);
  });
  await new Promise<void>((resolve) => neighbour.listen(0, '127.0.0.1', () => resolve()));
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await new Promise<void>((resolve) => (neighbour ? neighbour.close(() => resolve()) : resolve()));
  await app?.close();
});

async function waitingRun(runId: string) {
  await start(app.deps, 'copy, then drop old_rows with approval', runId);
  await workVisible(app.deps, app.runtime);
  const state = decodeState((await app.runtime.store.load(runId))!);
  expect(state.status).toBe('waiting');
  return state;
}

const status = async (runId: string) => {
  const stored = (await app.runtime.store.load(runId))!;
  return { status: decodeState(stored).status, cancelRequested: stored.cancelRequested };
};

describe("the inspector's forms", () => {
  it('a form on another origin of the same site cannot cancel or answer with the signed-in cookie; the inspector\'s own buttons still do', { timeout: 120_000 }, async () => {
    const state = await waitingRun('csrf-1');
    const page = await browser.newPage();
    await page.goto(`${app.url}/inspect?token=${API_TOKEN}`);
    expect(await page.title()).toBe('Runs');

    // The neighbour's page posts the inspector's own forms as soon as it loads.
    for (const action of ['/inspect/runs/csrf-1/cancel', `/inspect/runs/csrf-1/waits/${state.wait!.id}`]) {
      neighbourForm = `<form id="f" method="post" action="${app.url}${action}"><input name="decision" value="approve"></form><script>document.getElementById('f').submit()</script>`;
      const refused = page.waitForResponse((r) => r.url() === `${app.url}${action}`);
      await page.goto(`http://127.0.0.1:${(neighbour.address() as AddressInfo).port}/`);
      expect((await refused).status()).toBe(403);
      await page.waitForLoadState();
      expect(await page.title()).toBe('Refused');
      expect(await page.textContent('#outcome')).toContain('nothing was changed');
      expect(await status('csrf-1')).toEqual({ status: 'waiting', cancelRequested: undefined });
    }

    // A browser that sends Origin without Sec-Fetch-Site is held to the same rule.
    const withOrigin = await fetch(`${app.url}/inspect/runs/csrf-1/cancel`, {
      method: 'POST', redirect: 'manual', headers: { authorization: `Bearer ${API_TOKEN}`, origin: 'http://127.0.0.1:1' },
    });
    expect(withOrigin.status).toBe(403);
    expect(await status('csrf-1')).toEqual({ status: 'waiting', cancelRequested: undefined });

    await page.goto(`${app.url}/inspect/runs/csrf-1`);
    await Promise.all([page.waitForNavigation(), page.click('#cancel')]);
    expect(await page.textContent('#status')).toBe('cancelled');
  });
});
