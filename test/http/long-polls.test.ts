import { once } from 'node:events';
import { Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../lib/log.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';

describe('the long polls of GET /runs/:id one address may hold (stepwise serve)', () => {
  let app: Awaited<ReturnType<typeof startHttpApp>> | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('answers an address\'s long poll past its cap with 429 and Retry-After, logged once, while its other requests and other addresses go on', async () => {
    const lines: string[] = [];
    app = await startHttpApp({ longPolls: 2, log: createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } }) });
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'lp' }) })).status).toBe(201);
    const poll = '/runs/lp?after=1&waitSeconds=20';
    const first = new AbortController();
    const firstAnswer = app.api(poll, { signal: first.signal }).catch(() => undefined);
    const second = app.api(poll);
    await vi.waitFor(() => expect(app!.longPolls!.holding('127.0.0.1')).toBe(2));

    for (let i = 0; i < 2; i++) {
      const refused = await app.api(poll);
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect((await refused.json() as { error: string }).error).toMatch(/holds 2 waiting GET \/runs\/:id already/);
    }
    // Not waiting, a read of the run is no long poll: answered.
    expect((await app.api('/runs/lp')).status).toBe(200);
    const refusedLines = lines.filter((l) => l.includes('"long-poll-refused"'));
    expect(refusedLines).toHaveLength(1);
    expect(JSON.parse(refusedLines[0]!)).toMatchObject({ level: 'warn', address: '127.0.0.1', reason: 'long-polls-per-address', route: '/runs/lp' });

    // Another address has places of its own; one that goes away gives its place back.
    const other = new Socket();
    other.on('error', () => undefined);
    other.connect({ port: Number(new URL(app.url).port), host: '127.0.0.1', localAddress: '127.0.0.2' });
    await once(other, 'connect');
    other.write(`GET ${poll} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${API_TOKEN}\r\n\r\n`);
    await vi.waitFor(() => expect(app!.longPolls!.holding('127.0.0.2')).toBe(1));
    other.destroy();
    await vi.waitFor(() => expect(app!.longPolls!.holding('127.0.0.2')).toBe(0));

    // A poll this address gave up frees its place for the next one.
    first.abort();
    await firstAnswer;
    await vi.waitFor(() => expect(app!.longPolls!.holding('127.0.0.1')).toBe(1));
    const third = app.api(poll);
    await vi.waitFor(() => expect(app!.longPolls!.holding('127.0.0.1')).toBe(2));
    // The run moves: both answer with it, and give their places back.
    await workVisible(app.deps, app.runtime);
    for (const answer of await Promise.all([second, third])) {
      expect(answer.status).toBe(200);
      expect((await answer.json() as { run: { version: number } }).run.version).toBeGreaterThan(1);
    }
    expect(app.longPolls!.holding('127.0.0.1')).toBe(0);
  });
});
