import { afterEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeState } from '../../lib/core/codec.ts';
import { defineAgent } from '../../lib/agent.ts';
import { MAX_BODY_BYTES, createHttpApp } from '../../lib/http/app.ts';
import { signApproval } from '../../lib/waits/approval-token.ts';
import { start } from '../support/harness.ts';
import { startHttpApp } from '../support/http-app.ts';
import { outboxEmails } from '../support/outbox.ts';
import { workVisible } from '../support/queue-work.ts';
import { APPROVER } from '../support/wait-agent.ts';
import { keysOf } from '../../lib/waits/signing-key.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
afterEach(async () => {
  await app?.close();
  app = undefined as never;
});

async function waitingRun(runId = 'run') {
  app = app ?? (await startHttpApp());
  await start(app.deps, 'copy, then drop old_rows with approval', runId);
  await workVisible(app.deps, app.runtime);
  const state = decodeState((await app.runtime.store.load(runId))!);
  expect(state.status).toBe('waiting');
  const email = outboxEmails(join(app.dir, 'outbox')).find((e) => e.text.includes(`Run: ${runId} `))!;
  return { state, wait: state.wait!, link: email.link, token: email.link.split('/approvals/')[1]! };
}

const post = (link: string, form: Record<string, string>) => fetch(link, { method: 'POST', body: new URLSearchParams(form), redirect: 'manual' });
const version = async (runId = 'run') => (await app.runtime.store.load(runId))!.version;

describe('approval links', () => {
  it('GET only shows the page, with headers that keep the token private; POST decides once', async () => {
    const { link } = await waitingRun();
    const before = await version();
    for (let i = 0; i < 3; i++) {
      const page = await fetch(link);
      expect(page.status).toBe(200);
      expect(page.headers.get('referrer-policy')).toBe('no-referrer');
      expect(page.headers.get('cache-control')).toBe('no-store');
      expect(page.headers.get('x-frame-options')).toBe('DENY');
      expect(await page.text()).toContain('name="decision" value="approve"');
    }
    // HEAD, as some scanners send, decides nothing either.
    expect((await fetch(link, { method: 'HEAD' })).status).toBe(200);
    expect(await version()).toBe(before);
    // A form past what any request takes is refused before it is read, and decides nothing.
    const huge = await post(link, { decision: 'approve', comment: 'x'.repeat(MAX_BODY_BYTES) });
    expect(huge.status).toBe(413);
    expect(await huge.json()).toEqual({ error: `the request body is over ${MAX_BODY_BYTES} bytes, the most any request takes` });
    expect(await version()).toBe(before);
    // The connection it came on is closed, not kept alive and then dropped under the next requests.
    expect(huge.headers.get('connection')).toBe('close');
    for (let i = 0; i < 3; i++) expect((await fetch(link)).status).toBe(200);

    const first = await post(link, { decision: 'approve', comment: 'go' });
    expect(first.status).toBe(200);
    expect(await first.text()).toContain('Approved. The run continues.');
    const second = await post(link, { decision: 'reject' });
    expect(second.status).toBe(409);
    expect(await second.text()).toContain('Already approved by ops@example.com');
    expect(await version()).toBe(before + 1);
  });

  it('a link signed with the key a rotation replaced (signing.key.previous) still opens and answers; one signed with any other key is refused', async () => {
    app = await startHttpApp();
    const replaced = Buffer.alloc(32, 9);
    writeFileSync(join(app.dir, 'signing.key.previous'), replaced.toString('base64'));
    const { wait } = await waitingRun();
    const claim = { runId: 'run', waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline };
    const other = `${app.url}/approvals/${signApproval(claim, Buffer.alloc(32, 3))}`;
    expect((await fetch(other)).status).toBe(403);
    const before = `${app.url}/approvals/${signApproval(claim, replaced)}`;
    expect((await fetch(before)).status).toBe(200);
    const answered = await post(before, { decision: 'approve' });
    expect(answered.status).toBe(200);
    expect(await answered.text()).toContain('Approved. The run continues.');
  });

  it('a comment typed to the 4,000-character limit with line breaks is taken, as the browser posts it (each break CRLF)', async () => {
    const { link } = await waitingRun();
    // 4,000 characters as the page's maxlength counts them, a line break one; the posted form holds 4,039.
    const typed = `${Array(40).fill('x'.repeat(99)).join('\n')}x`;
    expect(typed).toHaveLength(4000);
    const response = await post(link, { decision: 'approve', comment: typed.replace(/\n/g, '\r\n') });
    expect(response.status).toBe(200);
    const state = decodeState((await app.runtime.store.load('run'))!);
    // Kept as typed: the model reads one \n a line break.
    expect(JSON.parse(state.steps[1]!.result.text).comment).toBe(typed);
  });

  it('refuses a tampered, malformed, expired or foreign token, changing nothing', async () => {
    const { link, token, wait } = await waitingRun();
    const before = await version();
    const key = keysOf(await app.signingKey()).signing;
    const base = link.slice(0, link.indexOf('/approvals/') + 11);
    const [v, payload, sig] = token.split('.') as [string, string, string];
    const cases: [string, number, RegExp][] = [
      [`${v}.${payload}.${sig.slice(0, -2)}AA`, 403, /not valid/],
      ['garbage', 400, /malformed/],
      [signApproval({ runId: 'run', waitId: wait.id, approver: APPROVER, expiresAt: app.clock.now() - 1 }, key), 410, /expired/],
      [signApproval({ runId: 'run', waitId: wait.id, approver: 'mallory@example.com', expiresAt: wait.deadline }, key), 403, /not an approver/],
      [signApproval({ runId: 'other-run', waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline }, key), 404, /does not exist/],
      [signApproval({ runId: 'run', waitId: 'wait-of-another-step', approver: APPROVER, expiresAt: wait.deadline }, key), 409, /waiting for another answer now, not for this approval/],
    ];
    for (const [bad, status, message] of cases) {
      const response = await post(`${base}${bad}`, { decision: 'approve' });
      expect(response.status, bad.slice(0, 30)).toBe(status);
      expect(await response.text()).toMatch(message);
    }
    // A token signed with another deployment's key.
    const foreign = signApproval({ runId: 'run', waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline }, Buffer.alloc(32, 7));
    expect((await fetch(`${base}${foreign}`)).status).toBe(403);
    // A link cut short at its slash, or run on past the token (a slash, more path a mail client added): the
    // approval page says so, where the API answered with its bearer-token check.
    for (const bad of [base, base.slice(0, -1), `${link}/`, `${link}/approve`]) {
      for (const method of ['GET', 'POST']) {
        const response = await fetch(bad, { method, ...(method === 'POST' ? { body: new URLSearchParams({ decision: 'approve' }) } : {}) });
        expect(response.status, `${method} ${bad.slice(-12)}`).toBe(400);
        expect(response.headers.get('referrer-policy')).toBe('no-referrer');
        expect(await response.text()).toContain('this approval link is incomplete or malformed');
      }
    }
    // A form without a decision.
    expect((await post(link, { comment: 'hi' })).status).toBe(400);
    // A form with two decisions decides neither: it was read as its last, a rejection.
    const both = await fetch(link, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'decision=approve&decision=reject' });
    expect(both.status).toBe(400);
    // A body that is no form of the type it names (multipart without its boundary, or cut short): not understood, not a 500.
    for (const type of ['multipart/form-data', 'multipart/form-data; boundary=x']) {
      const response = await fetch(link, { method: 'POST', headers: { 'content-type': type }, body: '--x\r\ncontent-disposition: form-data; name="decision"\r\n\r\napprove' });
      expect(response.status, type).toBe(400);
      expect(await response.text()).toContain('Press Approve or Reject on the approval page');
    }
    expect(await version()).toBe(before);
    expect((await app.runtime.store.load('run'))!.status).toBe('waiting');
  });

  it('with the key file left empty (a disk that filled as it was made), the link says the server cannot check it, a 500 that names no path', async () => {
    app = await startHttpApp();
    writeFileSync(join(app.dir, 'signing.key'), '');
    const token = signApproval({ runId: 'run', waitId: 'w', approver: APPROVER, expiresAt: app.clock.now() + 60_000 }, Buffer.alloc(32, 7));
    for (const response of [await fetch(`${app.url}/approvals/${token}`), await post(`${app.url}/approvals/${token}`, { decision: 'approve' })]) {
      // It was a 400 "Not done: the approval signing key in /tmp/.../signing.key must be at least 32 bytes of base64".
      expect(response.status).toBe(500);
      const page = await response.text();
      expect(page).toMatch(/cannot check approval links now: its signing key is unusable/);
      expect(page).not.toContain(app.dir);
    }
  });

  it('after the wait timed out, the link says so and changes nothing', async () => {
    const { link } = await waitingRun();
    app.clock.advance(3_600_000);
    await workVisible(app.deps, app.runtime);
    const state = decodeState((await app.runtime.store.load('run'))!);
    expect(state.steps[1]!.result.text).toContain('"timedOut":true');
    const after = await version();
    const response = await post(link, { decision: 'approve' });
    expect(response.status).toBe(410);
    expect(await response.text()).toContain('expired');
    expect(await version()).toBe(after);
  });

  it('an approval that comes after the deadline but before the timer fired is refused as expired, and the run times out', async () => {
    const { wait } = await waitingRun();
    app.clock.advance(3_600_000 - 1);
    // The link expires with the wait: sign one that is still valid for a moment past the deadline.
    const token = signApproval({ runId: 'run', waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline + 10_000 }, keysOf(await app.signingKey()).signing);
    app.clock.advance(2);
    const response = await post(`${app.url}/approvals/${token}`, { decision: 'approve' });
    expect(response.status).toBe(410);
    const state = decodeState((await app.runtime.store.load('run'))!);
    expect(state.status).toBe('running');
    expect(state.steps[1]!.result.text).toContain('"timedOut":true');
  });

  it('on AWS, another agent\'s API refuses the link of a run not its own (a key file the agents share), changing nothing', async () => {
    const { link } = await waitingRun();
    const before = await version();
    // The API of another agent on the same store, its queue its own, as behind API Gateway.
    const other = createHttpApp({
      store: app.runtime.store, blobs: app.runtime.blobs, queue: app.runtime.queue, clock: app.clock, workerId: 'api-other', codeVersion: 'test',
      log: app.deps.log, agent: defineAgent({ ...app.deps.agent, name: 'cleanup-tables' }), signingKey: app.signingKey, agentQueue: true,
    });
    const path = new URL(link).pathname;
    for (const init of [{}, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) }]) {
      const page = await other.request(path, init);
      expect(page.status).toBe(409);
      expect(await page.text()).toContain(`run run belongs to agent &quot;${app.deps.agent.name}&quot;, not &quot;cleanup-tables&quot;: operate it through that agent&#39;s API, whose queue its workers read. Nothing was changed.`);
    }
    expect(await version()).toBe(before);
    expect((await fetch(link)).status).toBe(200);
  });

  it('behind a proxy that serves the app under a path (STEPWISE_PUBLIC_URL with one), Approve posts where the link points', async () => {
    app = await startHttpApp();
    // The proxy passes /stepwise/... on without its prefix, and knows no other path.
    const proxy = createServer((req, res) => {
      if (!req.url?.startsWith('/stepwise/')) return void res.writeHead(404).end('not here');
      req.pipe(request(`${app.url}${req.url.slice('/stepwise'.length)}`, { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      }));
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      app.deps.waits!.publicUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/stepwise`;
      const { link } = await waitingRun();
      const page = await fetch(link);
      expect(page.status).toBe(200);
      // Where a browser sends the form: its action against the page's address (none: the page's address).
      const form = /<form method="post"(?: action="([^"]*)")?>/.exec(await page.text())!;
      const pressed = await post(new URL(form[1] ?? '', link).href, { decision: 'approve' });
      expect(pressed.status).toBe(200);
      expect(await pressed.text()).toContain('Approved. The run continues.');
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it('the link of a run that newer code wrote says so on a page, where the approver read raw JSON', async () => {
    const { link } = await waitingRun();
    const { version: at, head } = app.runtime.db.prepare("SELECT version, head FROM checkpoints WHERE run_id = 'run' ORDER BY version DESC LIMIT 1").get() as { version: number; head: string };
    app.runtime.db.prepare("UPDATE checkpoints SET head = ? WHERE run_id = 'run' AND version = ?").run(JSON.stringify({ ...JSON.parse(head), formatVersion: 9 }), at);
    for (const init of [{}, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) }]) {
      const page = await fetch(link, init);
      expect(page.status).toBe(409);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(page.headers.get('referrer-policy')).toBe('no-referrer');
      expect(await page.text()).toContain('it needs code that reads head format 9');
    }
    expect(await version()).toBe(at);
  });

  it('a link of a waiting run with a cancel on its way says it takes no answer, with no buttons; a press changes nothing but the cancel', async () => {
    const { link } = await waitingRun('cancelling');
    // As a cancel asked for while the step that began the wait ran leaves it: requestCancel takes none for a
    // run already waiting (cancelRun cancels that one at once), so the request is written as that step left it.
    const file = new Database(join(app.dir, 'stepwise.db'));
    file.prepare('UPDATE runs SET cancel_requested = ? WHERE run_id = ?').run('by ops@example.com at 2026-12-06T15:00:00.000Z', 'cancelling');
    file.close();
    const page = await fetch(link);
    expect(page.status).toBe(409);
    const html = await page.text();
    expect(html).toContain('This run is being cancelled (by ops@example.com at 2026-12-06T15:00:00.000Z): it takes no answer.');
    expect(html).not.toContain('name="decision"');
    // The inspector's wait panel, the same: what the run waits for, and no Approve to press.
    const inspected = await (await app.api('/inspect/runs/cancelling')).text();
    expect(inspected).toContain('id="cancel-requested"');
    expect(inspected).toContain('approval by');
    expect(inspected).not.toContain('name="decision"');
    const pressed = await post(link, { decision: 'approve' });
    expect(pressed.status).toBe(409);
    expect(decodeState((await app.runtime.store.load('cancelling'))!).status).toBe('cancelled');
  });
});
