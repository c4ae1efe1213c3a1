import { randomBytes, randomUUID } from 'node:crypto';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import { gatewayHandler } from '../../functions/api.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { createLogger } from '../../lib/log.ts';
import { signApproval } from '../../lib/waits/approval-token.ts';
import { runWaitingForApproval, startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>> | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

/** A payload 2.0 event as API Gateway sends it: `rawPath` decoded, `routeKey` the route it matched. */
function gatewayEvent(method: string, routeKey: string, rawPath: string, body?: string): APIGatewayProxyEventV2 {
  return {
    version: '2.0', routeKey, rawPath, rawQueryString: '', headers: { host: 'api.example.test', ...(body ? { 'content-type': 'application/json' } : {}) },
    requestContext: {
      accountId: '000000000000', apiId: 'api', domainName: 'api.example.test', domainPrefix: 'api', requestId: randomUUID(), routeKey,
      stage: '$default', time: new Date().toISOString(), timeEpoch: Date.now(),
      http: { method, path: rawPath, protocol: 'HTTP/1.1', sourceIp: '203.0.113.9', userAgent: 'test' },
    },
    isBase64Encoded: false, ...(body !== undefined ? { body } : {}),
  };
}

describe('the API Gateway handler', () => {
  it('keeps the public approval route to the approval pages: a dot segment or backslash does not reach the IAM routes', async () => {
    app = await startHttpApp();
    const { link } = await runWaitingForApproval(app);
    // As on AWS: no bearer token, IAM at the gateway on every route but /approvals/{token}.
    const lambda = gatewayHandler(createHttpApp({
      store: app.runtime.store, blobs: app.runtime.blobs, queue: app.runtime.queue, clock: app.clock, workerId: 'api', codeVersion: 'test',
      log: app.deps.log, agent: app.deps.agent, signingKey: app.signingKey, events: app.runtime.events, agentQueue: true,
    }));
    const call = async (method: string, routeKey: string, rawPath: string, body?: string) => (await lambda(gatewayEvent(method, routeKey, rawPath, body), {} as never)) as { statusCode: number; body: string };

    // `/approvals/..%2Fruns` as sent matches {token}; the gateway hands it over as `/approvals/../runs`.
    for (const rawPath of ['/approvals/../runs', '/approvals/..\\runs', '/approvals/%2e%2e/runs', '/approvals/../runs/run/history']) {
      const listed = await call('GET', 'GET /approvals/{token}', rawPath);
      expect(listed.statusCode, rawPath).toBe(400);
      expect(listed.body, rawPath).not.toContain('"run');
    }
    const posted = await call('POST', 'POST /approvals/{token}', '/approvals/../runs', JSON.stringify({ goal: 'not yours', runId: 'intruder' }));
    expect(posted.statusCode).toBe(400);
    expect(await app.runtime.store.load('intruder')).toBeUndefined();

    // The approval page itself, and the IAM routes the gateway authorized, are as before.
    const path = new URL(link).pathname;
    const page = await call('GET', 'GET /approvals/{token}', path);
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('name="decision" value="approve"');
    expect((await call('GET', '$default', '/runs')).body).toContain('"runId":"run"');
  });

  it("logs a forged link with API Gateway's source IP, and leaves the throttling to the gateway", async () => {
    const lines: string[] = [];
    app = await startHttpApp();
    const lambda = gatewayHandler(createHttpApp({
      store: app.runtime.store, blobs: app.runtime.blobs, queue: app.runtime.queue, clock: app.clock, workerId: 'api', codeVersion: 'test',
      log: createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } }),
      agent: app.deps.agent, signingKey: app.signingKey, events: app.runtime.events, agentQueue: true,
    }));
    const forged = signApproval({ runId: 'run', waitId: 'w', approver: 'ops@example.com', expiresAt: app.clock.now() + 60_000 }, randomBytes(32));
    for (let i = 0; i < 20; i++) {
      const answer = (await lambda(gatewayEvent('GET', 'GET /approvals/{token}', `/approvals/${forged}`), {} as never)) as { statusCode: number };
      expect(answer.statusCode).toBe(403);
    }
    const refusals = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === 'auth-refused');
    expect(refusals).toEqual([expect.objectContaining({ address: '203.0.113.9', route: '/approvals/<token>', reason: 'forged', refused: 1 })]);
    expect(lines.join('\n')).not.toContain(forged.split('.')[2]);
  });
});
