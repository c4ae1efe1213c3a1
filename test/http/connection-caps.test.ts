import { once } from 'node:events';
import { Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HEADERS_MS, KEEP_ALIVE_MS, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS, REQUEST_MS } from '../../lib/http/node-server.ts';
import { createLogger } from '../../lib/log.ts';
import { startHttpApp } from '../support/http-app.ts';

/**
 * A raw connection to the app from `from` (any 127.x.y.z reaches 127.0.0.1 on Linux: another client
 * address on one machine), with what it was sent and whether the server closed it.
 */
async function connectFrom(url: string, from: string) {
  const { hostname, port } = new URL(url);
  const socket = new Socket();
  let received = '';
  socket.on('data', (chunk: Buffer) => { received += String(chunk); });
  socket.on('error', () => undefined); // a reset is a close, as the tests count it
  const closed = once(socket, 'close');
  socket.connect({ port: Number(port), host: hostname, localAddress: from });
  await Promise.race([once(socket, 'connect'), closed]);
  return { socket, closed, received: () => received, isClosed: () => socket.closed };
}

/** Sends the request line, then one header byte each `everyMs` for as long as the socket is open: slowloris. */
function trickle(socket: Socket, everyMs: number): void {
  if (socket.closed) return;
  socket.write('GET /health HTTP/1.1\r\nHost: x\r\n');
  const timer = setInterval(() => { if (!socket.closed) socket.write('a'); }, everyMs);
  socket.once('close', () => clearInterval(timer));
}

const openConnections = (server: { getConnections(cb: (error: Error | null, n: number) => void): void }) =>
  new Promise<number>((resolve, reject) => server.getConnections((error, n) => (error ? reject(error) : resolve(n))));

describe('stepwise serve under a client that holds connections', () => {
  let app: Awaited<ReturnType<typeof startHttpApp>> | undefined;
  const sockets: Socket[] = [];
  afterEach(async () => {
    for (const socket of sockets.splice(0)) socket.destroy();
    await app?.close();
    app = undefined;
  });

  it('sets its limits on the server on purpose, not left to Node\'s defaults', async () => {
    app = await startHttpApp();
    expect(app.server.headersTimeout).toBe(HEADERS_MS);
    expect(app.server.requestTimeout).toBe(REQUEST_MS);
    expect(app.server.keepAliveTimeout).toBe(KEEP_ALIVE_MS);
    expect(app.server.maxConnections).toBe(MAX_CONNECTIONS);
    // Node's defaults were 60 s, 5 minutes, and no cap.
    expect(HEADERS_MS).toBeLessThan(60_000);
    expect(REQUEST_MS).toBeLessThan(300_000);
    expect(MAX_CONNECTIONS_PER_ADDRESS).toBeLessThan(MAX_CONNECTIONS);
    // Node refuses a headers limit over the request's.
    expect(HEADERS_MS).toBeLessThanOrEqual(REQUEST_MS);
  });

  it('serves a well-behaved client while another address opens sockets past its cap and trickles headers, and closes every slow one', async () => {
    const lines: string[] = [];
    app = await startHttpApp({
      log: createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } }),
      // Small limits, so the test waits for the server's events, not for minutes.
      limits: { maxConnections: 8, maxConnectionsPerAddress: 4, headersMs: 400, requestMs: 400, checkMs: 50 },
    });
    // More sockets than the whole cap, from one address, each sending its headers a byte at a time.
    const slow = await Promise.all(Array.from({ length: 12 }, () => connectFrom(app!.url, '127.0.0.2')));
    for (const s of slow) {
      sockets.push(s.socket);
      trickle(s.socket, 20);
    }
    // Past its address's 4, each is closed as it came: it holds no place.
    await vi.waitFor(() => expect(slow.filter((s) => s.isClosed())).toHaveLength(8), { timeout: 5_000, interval: 10 });
    const held = slow.filter((s) => !s.isClosed());
    expect(held).toHaveLength(4);

    // Another client is served while the 4 trickle on: no place is taken from it.
    expect(held.every((s) => !s.isClosed())).toBe(true);
    const answer = await fetch(`${app.url}/health`);
    expect(answer.status).toBe(200);
    expect(await answer.json()).toMatchObject({ ok: true });

    // The 4 whose headers never end are answered 408 and closed by the server, not left to the client.
    // (Bounded well below Node's own 60 s, which would close them too.)
    await vi.waitFor(() => expect(held.every((s) => s.isClosed())).toBe(true), { timeout: 10_000, interval: 20 });
    for (const s of held) expect(s.received()).toMatch(/^HTTP\/1\.1 408 /);

    // One line for the address's first refused connection; the rest are counted for the line a minute on.
    const refused = lines.filter((l) => l.includes('"connection-refused"')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ level: 'warn', address: '127.0.0.2', reason: 'max-connections-per-address', refused: 1 });
  });

  it('closes a connection past the cap of all connections as it comes, logged with its address, and takes new ones once places are free', async () => {
    const lines: string[] = [];
    app = await startHttpApp({
      log: createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } }),
      limits: { maxConnections: 3, maxConnectionsPerAddress: 2 },
    });
    const held = [];
    for (const from of ['127.0.0.2', '127.0.0.2', '127.0.0.3']) {
      const s = await connectFrom(app.url, from);
      sockets.push(s.socket);
      held.push(s);
    }
    await vi.waitFor(async () => expect(await openConnections(app!.server)).toBe(3));
    const over = await connectFrom(app.url, '127.0.0.4');
    sockets.push(over.socket);
    await over.closed;
    expect(over.received()).toBe('');
    expect(held.every((s) => !s.isClosed())).toBe(true);
    await vi.waitFor(() => expect(lines.filter((l) => l.includes('"connection-refused"'))).toHaveLength(1));
    expect(JSON.parse(lines.find((l) => l.includes('"connection-refused"'))!)).toMatchObject({ address: '127.0.0.4', reason: 'max-connections' });

    for (const s of held) s.socket.destroy();
    await vi.waitFor(async () => expect(await openConnections(app!.server)).toBe(0));
    expect((await fetch(`${app.url}/health`)).status).toBe(200);
  });
});
