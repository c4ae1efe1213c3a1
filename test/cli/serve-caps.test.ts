import { once } from 'node:events';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const AGENT = join(ROOT, 'test/support/approval-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());

/** A connection from `from` (another client address on this machine); resolves once open, or closed. */
async function connectFrom(port: number, from: string) {
  const socket = new Socket();
  socket.on('error', () => undefined);
  const closed = once(socket, 'close');
  socket.connect({ port, host: '127.0.0.1', localAddress: from });
  await Promise.race([once(socket, 'connect'), closed]);
  return { socket, closed };
}

/** test/http/connection-caps.test.ts tries the caps and the timeouts on serveApp; here, that `serve` takes its flags and logs. */
describe('stepwise serve --max-connections-per-address', () => {
  it('closes an address\'s connections past its cap, logs it with the address, serves another address meanwhile, and holds its long polls to a share of its places', async () => {
    const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', STEPWISE_LOG_FORMAT: 'json', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: 'serve-caps-token-0123456789' };
    const port = await freePort();
    const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port), '--max-connections', '16', '--max-connections-per-address', '2'], env);
    const sockets: Socket[] = [];
    try {
      await server.line(/^serving agent approval-e2e on /);
      for (let i = 0; i < 2; i++) sockets.push((await connectFrom(port, '127.0.0.2')).socket);
      const over = await connectFrom(port, '127.0.0.2');
      sockets.push(over.socket);
      await over.closed;
      expect(sockets.slice(0, 2).every((s) => !s.closed)).toBe(true);
      expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
      const refused = () => server.err().split('\n').filter((l) => l.includes('"connection-refused"'));
      await vi.waitFor(() => expect(refused()).toHaveLength(1));
      expect(JSON.parse(refused()[0]!)).toMatchObject({ level: 'warn', address: '127.0.0.2', reason: 'max-connections-per-address' });

      // Long polls of a run hold a quarter of an address's places (at least one): a second is refused.
      const api = (path: string, init: RequestInit = {}) => fetch(`http://127.0.0.1:${port}${path}`, { ...init, headers: { authorization: `Bearer ${env.STEPWISE_API_TOKEN}`, 'content-type': 'application/json' } });
      expect((await api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'caps' }) })).status).toBe(201);
      const held = new AbortController();
      const holding = api('/runs/caps?after=1&waitSeconds=20', { signal: held.signal }).catch(() => undefined);
      try {
        // Until the first is in hand, a probe may take the place itself, and answers when its second passes.
        await vi.waitFor(async () => expect((await api('/runs/caps?after=1&waitSeconds=1')).status).toBe(429), { timeout: 10_000 });
      } finally {
        held.abort();
        await holding;
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      await server.stop();
    }
  }, 30_000);
});
