import Database from 'better-sqlite3';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { launchBrowser } from '../support/browser.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { outboxEmails } from '../support/outbox.ts';
import { runStepwise, type Running } from '../support/processes.ts';
import { HOSTILE } from '../support/approval-agent.ts';

const AGENT = join(ROOT, 'test/support/approval-agent.ts');
const db = tempDb();
const dir = join(db.path, '..');
let port: number;
let env: Record<string, string>;
let server: Running;
let browser: Browser;

beforeAll(async () => {
  port = await freePort();
  env = {
    STEPWISE_DB: db.path, EFFECTS_DB: join(dir, 'effects.db'), STEPWISE_PUBLIC_URL: `http://127.0.0.1:${port}`,
    STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '',
  };
  server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], env);
  await server.line(/^serving agent approval-e2e on http:\/\/127\.0\.0\.1:\d+/);
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await server?.stop();
  db.cleanup();
});

async function runToApproval(runId: string): Promise<{ link: string; workerOut: string }> {
  expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', `migrate the rows ${HOSTILE}`, '--run-id', runId], env)).code).toBe(0);
  // Worker A works the run until it waits, then finds nothing to do and exits: the waiting run needs no process.
  const a = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1500'], env);
  expect(a.code).toBe(0);
  const status = JSON.parse((await stepwiseCli(['status', runId, '--json'], env)).out) as { status: string };
  expect(status.status).toBe('waiting');
  const email = outboxEmails(join(dir, 'outbox')).find((e) => e.text.includes(`Run: ${runId} `));
  expect(email).toBeDefined();
  expect(email!.to).toBe('ops@example.com');
  expect(email!.link.startsWith(`http://127.0.0.1:${port}/approvals/v1.`)).toBe(true);
  // The worker prints the link too, for whoever watches it in a terminal.
  expect(a.out).toMatch(new RegExp(`run ${runId} v\\d+  step 2  waiting for approval by ops@example.com until \\S+\\n  approve or reject: ${email!.link.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  return { link: email!.link, workerOut: a.out };
}

function dropped(): { key: string; tbl: string }[] {
  const effects = new Database(join(dir, 'effects.db'));
  try {
    effects.exec('CREATE TABLE IF NOT EXISTS dropped (key TEXT PRIMARY KEY, tbl TEXT NOT NULL, pid INTEGER NOT NULL)');
    return effects.prepare('SELECT key, tbl FROM dropped ORDER BY key').all() as { key: string; tbl: string }[];
  } finally {
    effects.close();
  }
}

describe('the approval page in a browser', () => {
  it('opening the emailed link shows the request as text; Approve resumes the run on another worker, which completes it', { timeout: 240_000 }, async () => {
    const { link, workerOut } = await runToApproval('e2e-approve');
    const page = await browser.newPage();
    await page.goto(link);
    expect(await page.title()).toBe('Approval needed');
    // Hostile text in the goal and the request is shown, not run.
    expect(await page.textContent('#goal')).toContain(HOSTILE);
    expect(await page.textContent('#request')).toContain(HOSTILE);
    expect(await page.locator('#request img').count()).toBe(0);
    // Opening the page twice (a mail scanner, a preview) decides nothing.
    await page.reload();
    expect(JSON.parse((await stepwiseCli(['status', 'e2e-approve', '--json'], env)).out).status).toBe('waiting');

    await page.fill('#comment', 'ok <b>go</b>');
    await Promise.all([page.waitForNavigation(), page.click('button.approve')]);
    expect(await page.textContent('#outcome')).toBe('Approved. The run continues.');
    expect(await page.title()).not.toBe('pwned');
    await page.close();

    const b = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1500'], env);
    expect(b.code).toBe(0);
    const state = JSON.parse((await stepwiseCli(['status', 'e2e-approve', '--json'], env)).out) as { status: string; summary: string; steps: { tool: string; workerId: string; result: { text: string } }[] };
    expect(state).toMatchObject({ status: 'completed', summary: 'Copied and dropped old_rows.' });
    expect(state.steps.map((s) => s.tool)).toEqual(['write_row', 'request_approval', 'drop_table']);
    expect(state.steps[1]!.result.text).toContain('"comment":"ok <b>go</b>"');
    const workerA = /worker (\S+) (?:started|ready)/.exec(workerOut)?.[1];
    expect(workerA).toBeDefined();
    expect(state.steps[0]!.workerId).toBe(workerA);
    expect(state.steps[2]!.workerId).not.toBe(workerA);
    expect(dropped()).toEqual([{ key: 'e2e-approve/step-3', tbl: 'old_rows' }]);

    // The link is single use: opening it again shows the decision, with no buttons.
    const again = await browser.newPage();
    const response = await again.goto(link);
    expect(response?.status()).toBe(409);
    expect(await again.textContent('#outcome')).toContain('Already approved by ops@example.com');
    expect(await again.locator('button').count()).toBe(0);
    await again.close();
  });

  it('Reject: the model sees the rejection and finishes without the risky step', { timeout: 240_000 }, async () => {
    const { link } = await runToApproval('e2e-reject');
    const page = await browser.newPage();
    await page.goto(link);
    await page.fill('#comment', 'not during business hours');
    await Promise.all([page.waitForNavigation(), page.click('button.reject')]);
    expect(await page.textContent('#outcome')).toContain('Rejected.');
    await page.close();
    expect((await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1500'], env)).code).toBe(0);
    const state = JSON.parse((await stepwiseCli(['status', 'e2e-reject', '--json'], env)).out) as { status: string; summary: string };
    expect(state).toMatchObject({ status: 'completed', summary: 'Rejected: old_rows kept.' });
    expect(dropped().filter((d) => d.key.startsWith('e2e-reject/'))).toEqual([]);
  });
});
