import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { THROTTLE_REFUSALS } from '../../lib/http/auth-throttle.ts';
import { freePort } from '../support/aws-servers.ts';
import { ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const AGENT = join(ROOT, 'test/support/approval-agent.ts');
const TOKEN = 'serve-auth-token-0123456789';
const WRONG = 'serve-auth-wrong-0123456789';
const db = tempDb();
afterAll(() => db.cleanup());

/** test/http/auth-refusals.test.ts tries the throttle and the log on the app; here, that `serve` has them. */
describe('stepwise serve refusing wrong tokens', () => {
  it('logs the refusals without the token, holds back an address past its limit with 429, and takes the right token all the while', async () => {
    const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: TOKEN };
    const port = await freePort();
    const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], env);
    try {
      await server.line(/^serving agent approval-e2e on /);
      const url = `http://127.0.0.1:${port}/runs`;
      const wrong = { headers: { authorization: `Bearer ${WRONG}` } };
      for (let i = 0; i < THROTTLE_REFUSALS; i++) expect((await fetch(url, wrong)).status).toBe(401);
      const held = await fetch(url, wrong);
      expect(held.status).toBe(429);
      expect(Number(held.headers.get('retry-after'))).toBeGreaterThan(0);
      expect((await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
      // One line for the first; the rest are counted for the line a minute on.
      const refusals = () => server.err().split('\n').filter((l) => l.includes('auth-refused'));
      await vi.waitFor(() => expect(refusals()).toHaveLength(1));
      const lines = refusals();
      expect(lines[0]).toMatch(/127\.0\.0\.1/);
      expect(lines[0]).toMatch(/\/runs/);
      expect(lines[0]).toMatch(/wrong/);
      // Stopped, serve writes what it counted since.
      await server.stop();
      const all = refusals();
      expect(all).toHaveLength(2);
      expect(all[1]).toMatch(/"refused":10\b|refused=10\b/);
      expect(server.err()).not.toContain(WRONG);
    } finally {
      await server.stop();
    }
  }, 30_000);
});
