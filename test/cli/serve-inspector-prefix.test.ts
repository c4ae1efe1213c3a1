import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const AGENT = join(ROOT, 'test/support/approval-agent.ts');
const TOKEN = 'prefix-test-token-0123456789';
const db = tempDb();
afterAll(() => db.cleanup());

/**
 * A proxy serving the app under a path (STEPWISE_PUBLIC_URL https://host/stepwise) takes the path off before
 * passing a request on. The approval links worked there; the inspector's absolute /inspect links, its
 * sign-in redirect and its cookie's path went past the proxy, so it could not be used at all.
 */
describe('stepwise serve behind a proxy that serves it under a path', () => {
  it("puts the path back in the inspector's links, redirects and cookie", async () => {
    const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: TOKEN };
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'copy the rows', '--run-id', 'behind-proxy'], env)).code).toBe(0);
    const port = await freePort();
    const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], { ...env, STEPWISE_PUBLIC_URL: 'https://example.com/stepwise/' });
    try {
      await server.line(/^serving agent approval-e2e on /);
      // What the proxy passes on: the path without its prefix.
      const url = `http://127.0.0.1:${port}`;
      const signIn = await fetch(`${url}/inspect?token=${TOKEN}`, { redirect: 'manual' });
      expect(signIn.status).toBe(303);
      expect(signIn.headers.get('location')).toBe('/stepwise/inspect');
      const cookie = signIn.headers.get('set-cookie')!;
      expect(cookie).toMatch(/; Path=\/stepwise\/inspect(;|$)/);
      const session = /stepwise_token=([^;]+)/.exec(cookie)![1];
      const list = await (await fetch(`${url}/inspect`, { headers: { cookie: `stepwise_token=${session}` } })).text();
      expect(list).toContain('<a href="/stepwise/inspect/runs/behind-proxy">behind-proxy</a>');
      expect(list).toContain('<a href="/stepwise/inspect?status=waiting">waiting</a>');
      expect(list).not.toMatch(/href="\/inspect/);
      const run = await (await fetch(`${url}/inspect/runs/behind-proxy`, { headers: { cookie: `stepwise_token=${session}` } })).text();
      expect(run).toContain('<a href="/stepwise/inspect">all runs</a>');
      expect(run).toContain('action="/stepwise/inspect/runs/behind-proxy/cancel"');
      expect(run).not.toMatch(/(href|action)="\/inspect/);
      const cancelled = await fetch(`${url}/inspect/runs/behind-proxy/cancel`, {
        method: 'POST', redirect: 'manual',
        headers: { cookie: `stepwise_token=${session}`, 'content-type': 'application/x-www-form-urlencoded', origin: url },
        body: 'reason=moved',
      });
      expect(cancelled.status).toBe(303);
      expect(cancelled.headers.get('location')).toBe('/stepwise/inspect/runs/behind-proxy');
      const signedOut = await (await fetch(`${url}/inspect`)).text();
      expect(signedOut).toContain('Open /stepwise/inspect?token=');
    } finally {
      await server.stop();
    }
  }, 30_000);
});
