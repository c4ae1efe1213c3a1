import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { launchBrowser } from '../support/browser.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise, type Running } from '../support/processes.ts';
import { HOSTILE } from '../support/approval-agent.ts';

const AGENT = join(ROOT, 'test/support/approval-agent.ts');
const db = tempDb();
const dir = join(db.path, '..');
let url: string;
let env: Record<string, string>;
let server: Running;
let browser: Browser;

beforeAll(async () => {
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  env = { STEPWISE_DB: db.path, EFFECTS_DB: join(dir, 'effects.db'), STEPWISE_PUBLIC_URL: url, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };
  server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], env);
  await server.line(/^serving agent /);
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await server?.stop();
  db.cleanup();
});

describe('the run inspector in a browser', () => {
  it('needs the API token; shows runs, a timeline matching `stepwise history --json`, hostile text as text, and answers a wait', { timeout: 240_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', `inspect me ${HOSTILE}`, '--run-id', 'insp-1'], env)).code).toBe(0);
    expect((await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1500'], env)).code).toBe(0);
    const page = await browser.newPage();
    expect((await page.goto(`${url}/inspect`))?.status()).toBe(401);
    const token = readFileSync(join(dir, 'api-token'), 'utf8').trim();
    await page.goto(`${url}/inspect?token=wrong`);
    expect(await page.title()).toBe('Sign in');
    await page.goto(`${url}/inspect?token=${token}`);
    // The token left the address bar for a cookie.
    expect(page.url()).toBe(`${url}/inspect`);
    expect(await page.textContent('#runs')).toContain('insp-1');
    expect(await page.locator('#runs img').count()).toBe(0);

    await page.click('text=insp-1');
    expect(await page.textContent('#status')).toBe('waiting');
    expect(await page.textContent('#goal')).toContain(HOSTILE);
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.title()).not.toBe('pwned');
    const history = JSON.parse((await stepwiseCli(['history', 'insp-1', '--json'], env)).out) as { version: number; step: number; status: string; tool?: string; workerId: string }[];
    const rows = await page.$$eval('#timeline tr.checkpoint', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')));
    expect(rows.map((r) => [Number(r[0]), Number(r[1]), r[2], r[3] || undefined, r[6]])).toEqual(history.map((h) => [h.version, h.step, h.status, h.tool, h.workerId]));
    expect(await page.locator('#chart rect').count()).toBe(1);

    await page.fill('input[name=comment]', 'looks fine');
    await Promise.all([page.waitForNavigation(), page.click('button.approve')]);
    expect(await page.textContent('#status')).toBe('running');
    await page.close();
    expect((await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1500'], env)).code).toBe(0);
    const state = JSON.parse((await stepwiseCli(['status', 'insp-1', '--json'], env)).out) as { status: string; steps: { result: { text: string } }[] };
    expect(state.status).toBe('completed');
    expect(state.steps[1]!.result.text).toContain('looks fine (from the inspector)');

    // Fork the finished run from step 1, then cancel the fork while it waits: both from the page.
    const ops = await browser.newPage();
    await ops.goto(`${url}/inspect?token=${token}`);
    await ops.goto(`${url}/inspect/runs/insp-1`);
    await ops.fill('input[name=fromStep]', '1');
    // With its own step cap and budget, in the fork form's fields (the dollar one a plain decimal the browser lets through).
    await ops.fill('form[action$="/fork"] input[name=stepCap]', '7');
    await ops.fill('form[action$="/fork"] input[name=budgetTokens]', '50000');
    const usd = 'form[action$="/fork"] input[name=budgetUsd]';
    await ops.fill(usd, '1e-6');
    expect(await ops.$eval(usd, (input) => (input as unknown as { validity: { patternMismatch: boolean } }).validity.patternMismatch)).toBe(true);
    await ops.fill(usd, '0.5');
    await Promise.all([ops.waitForNavigation(), ops.click('#fork')]);
    const forkId = (await ops.textContent('#run-id'))!;
    expect(forkId).toMatch(/^insp-1-fork-1-/);
    expect(await ops.textContent('#status')).toBe('running');
    expect((await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1500'], env)).code).toBe(0);
    await ops.reload();
    expect(await ops.textContent('#status')).toBe('waiting');
    await Promise.all([ops.waitForNavigation(), ops.click('#cancel')]);
    expect(await ops.textContent('#status')).toBe('cancelled');
    expect(await ops.locator('#cancel').count()).toBe(0);
    await ops.close();
    const fork = JSON.parse((await stepwiseCli(['status', forkId, '--json'], env)).out) as { status: string; forkedFrom: { runId: string; step: number }; steps: { step: number }[] };
    expect(fork).toMatchObject({ status: 'cancelled', forkedFrom: { runId: 'insp-1', step: 1 }, stepCap: 7, budget: { tokens: 50_000, usd: 0.5 } });
    // Its own keys: the fork's step 1 is the parent's copy; nothing of the parent ran again.
    const parent = JSON.parse((await stepwiseCli(['status', 'insp-1', '--json'], env)).out) as { status: string; version: number };
    expect(parent.status).toBe('completed');
  });
});
