import { request } from 'node:http';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { THROTTLE_REFUSALS } from '../../lib/http/auth-throttle.ts';
import { REFUSAL_LOG_INTERVAL_MS, RefusalLog } from '../../lib/http/refusal-log.ts';
import { createLogger } from '../../lib/log.ts';
import { signApproval } from '../../lib/waits/approval-token.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { keysOf } from '../../lib/waits/signing-key.ts';

/**
 * A request from a given address of the loopback network (127.0.0.0/8 is all this machine's), so that one
 * server sees several clients. fetch cannot choose its source address.
 */
function from(address: string, url: string, headers: Record<string, string> = {}, method = 'GET'): Promise<{ status: number; retryAfter: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, localAddress: address, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => { body += chunk; });
      res.on('end', () => resolve({ status: res.statusCode!, retryAfter: res.headers['retry-after'], body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const WRONG = 'wrong-token-that-must-not-be-logged';
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

function capture() {
  const lines: string[] = [];
  const log = createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } });
  const refusals = () => lines.filter((l) => l.includes('"auth-refused"')).map((l) => JSON.parse(l) as Record<string, unknown>);
  return { lines, log, refusals };
}

describe('requests refused for their token or link', () => {
  let app: Awaited<ReturnType<typeof startHttpApp>> | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('each kind of refusal is a warn line with its route, method, address and reason, never the token or the signature', async () => {
    const { lines, log, refusals } = capture();
    app = await startHttpApp({ log });
    const key = keysOf(await app.signingKey()).signing;
    const forged = signApproval({ runId: 'run', waitId: 'w', approver: 'ops@example.com', expiresAt: app.clock.now() + 60_000 }, randomBytes(32));
    const expired = signApproval({ runId: 'old-run', waitId: 'w', approver: 'ops@example.com', expiresAt: app.clock.now() - 1 }, key);
    const asked: [string, Record<string, string>, number][] = [
      ['/runs', {}, 401],
      ['/runs/r1', bearer(WRONG), 401],
      [`/inspect?token=${WRONG}`, {}, 401],
      [`/approvals/${forged}`, {}, 403],
      [`/approvals/${expired}`, {}, 410],
    ];
    for (const [path, headers, status] of asked) {
      expect((await from('127.0.0.1', `${app.url}${path}`, headers)).status, path).toBe(status);
      // A line per address per interval: each kind in an interval of its own.
      app.clock.advance(REFUSAL_LOG_INTERVAL_MS);
    }
    expect(refusals().map(({ route, method, address, reason, refused }) => ({ route, method, address, reason, refused }))).toEqual([
      { route: '/runs', method: 'GET', address: '127.0.0.1', reason: 'missing', refused: 1 },
      { route: '/runs/r1', method: 'GET', address: '127.0.0.1', reason: 'wrong', refused: 1 },
      { route: '/inspect', method: 'GET', address: '127.0.0.1', reason: 'wrong', refused: 1 },
      { route: '/approvals/<token>', method: 'GET', address: '127.0.0.1', reason: 'forged', refused: 1 },
      { route: '/approvals/<token>', method: 'GET', address: '127.0.0.1', reason: 'expired', refused: 1 },
    ]);
    expect(refusals().every((l) => l.level === 'warn')).toBe(true);
    // The expired link's run is named: its claim was signed here.
    expect(refusals()[4]!.runId).toBe('old-run');
    const text = lines.join('\n');
    expect(text).not.toContain(WRONG);
    for (const link of [forged, expired]) expect(text).not.toContain(link.split('.')[2]);
    // The right token is no refusal.
    expect((await from('127.0.0.1', `${app.url}/runs`, bearer(API_TOKEN))).status).toBe(200);
    expect(refusals()).toHaveLength(5);
  });

  it('a flood from one address is one line at once and one line an interval after, with the count, not a line each', async () => {
    const captured = capture();
    app = await startHttpApp({ log: captured.log });
    for (let i = 0; i < 25; i++) expect((await from('127.0.0.2', `${app.url}/runs`, bearer(`${WRONG}-${i}`))).status).toBe(401);
    for (let i = 0; i < 3; i++) expect((await from('127.0.0.2', `${app.url}/runs`)).status).toBe(401);
    // Another address has a line of its own at once.
    expect((await from('127.0.0.3', `${app.url}/events`, {}, 'POST')).status).toBe(401);
    expect(captured.refusals().map((l) => [l.address, l.refused])).toEqual([['127.0.0.2', 1], ['127.0.0.3', 1]]);
    // The interval passes with no request more: its count is written all the same.
    app.clock.advance(REFUSAL_LOG_INTERVAL_MS);
    const lines = captured.refusals();
    expect(lines).toHaveLength(3);
    expect(lines[2]).toMatchObject({ address: '127.0.0.2', refused: 27, reasons: { wrong: 24, missing: 3 }, reason: 'missing' });
    // Quiet for an interval: the next refusal is said at once again.
    app.clock.advance(REFUSAL_LOG_INTERVAL_MS);
    expect((await from('127.0.0.2', `${app.url}/runs`)).status).toBe(401);
    expect(captured.refusals()).toHaveLength(4);
  });

  it("serve's throttle answers 429 with Retry-After past its limit, lets the right token through, and lets go when the window passes", async () => {
    const captured = capture();
    app = await startHttpApp({ log: captured.log, throttle: {} });
    const { url } = app;
    for (let i = 0; i < THROTTLE_REFUSALS; i++) expect((await from('127.0.0.4', `${url}/runs`, bearer(WRONG))).status).toBe(401);
    const held = await from('127.0.0.4', `${url}/runs`, bearer(WRONG));
    expect(held.status).toBe(429);
    expect(held.retryAfter).toBe('60');
    expect(JSON.parse(held.body).error).toMatch(/too many requests from this address without the right token: try again in 60 s/);
    // The right token from the same address is never held back.
    expect((await from('127.0.0.4', `${url}/runs`, bearer(API_TOKEN))).status).toBe(200);
    // Nor another address.
    expect((await from('127.0.0.5', `${url}/runs`, bearer(WRONG))).status).toBe(401);
    app.clock.advance(45_000);
    // The inspector and the approval pages are held back too, as pages, with the time left.
    const page = await from('127.0.0.4', `${url}/inspect`);
    expect([page.status, page.retryAfter]).toEqual([429, '15']);
    expect(page.body).toContain('Too many tries');
    const link = await from('127.0.0.4', `${url}/approvals/v1.not.signed`);
    expect([link.status, link.retryAfter]).toEqual([429, '15']);
    app.clock.advance(15_000);
    expect((await from('127.0.0.4', `${url}/runs`, bearer(WRONG))).status).toBe(401);
    // The log counts what the throttle answered.
    const summary = captured.refusals().find((l) => l.address === '127.0.0.4' && (l.refused as number) > 1);
    expect(summary).toMatchObject({ refused: THROTTLE_REFUSALS + 2, throttled: 3 });
  });

  it('the throttle tracks a bounded number of addresses, dropping the oldest', async () => {
    app = await startHttpApp({ throttle: { limit: 2, maxAddresses: 3 } });
    const { url } = app;
    for (let i = 0; i < 2; i++) expect((await from('127.0.0.10', `${url}/runs`)).status).toBe(401);
    expect((await from('127.0.0.10', `${url}/runs`)).status).toBe(429);
    for (const address of ['127.0.0.11', '127.0.0.12', '127.0.0.13', '127.0.0.14']) {
      expect((await from(address, `${url}/runs`)).status).toBe(401);
      expect(app.throttle!.size).toBeLessThanOrEqual(3);
    }
    expect(app.throttle!.size).toBe(3);
    // 127.0.0.10's window, the oldest, was dropped: it starts again. 127.0.0.14's was kept.
    expect((await from('127.0.0.10', `${url}/runs`)).status).toBe(401);
    expect((await from('127.0.0.14', `${url}/runs`)).status).toBe(401);
    expect((await from('127.0.0.14', `${url}/runs`)).status).toBe(429);
  });
});

describe('the refusal log under refusals from many addresses', () => {
  it('writes a line for each of a bounded number of addresses an interval, and counts the rest together', () => {
    const { log, refusals } = capture();
    const clock = new ManualClock();
    const refusalLog = new RefusalLog(log, clock, { maxAddresses: 4 });
    for (let i = 0; i < 50; i++) refusalLog.refused({ address: `2001:db8::${i.toString(16)}`, method: 'GET', route: '/runs', reason: 'wrong' });
    // Four addresses, then one line for the others, then their count at the interval's end.
    expect(refusals().map((l) => [l.address, l.refused])).toEqual([
      ['2001:db8::0', 1], ['2001:db8::1', 1], ['2001:db8::2', 1], ['2001:db8::3', 1], ['others', 1],
    ]);
    clock.advance(REFUSAL_LOG_INTERVAL_MS);
    expect(refusals().slice(5).map((l) => [l.address, l.refused])).toEqual([['others', 45]]);
    // Their interval over, the tracked addresses are let go: a new one has a line of its own.
    clock.advance(REFUSAL_LOG_INTERVAL_MS);
    refusalLog.refused({ address: '2001:db8::ffff', method: 'GET', route: '/runs', reason: 'wrong' });
    expect(refusals().at(-1)).toMatchObject({ address: '2001:db8::ffff', refused: 1 });
  });
});
