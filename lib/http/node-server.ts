import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { serve } from '@hono/node-server';
import type { Logger } from '../log.ts';
import type { Clock } from '../ports.ts';
import { RefusalLog, type RefusalLine } from './refusal-log.ts';

/**
 * How long a connection of `stepwise serve` may go with no byte moving either way before it is closed:
 * a client that stopped reading its answer (a step's whole output, megabytes) held the answer in serve's
 * memory and its socket for as long as the client lived, since Node sets no such limit. Longer than a long
 * poll of GET /runs/:id waits with nothing to send, and than any request takes to answer.
 */
export const IDLE_CONNECTION_MS = 60_000;
/**
 * How long a client has to send its request's headers whole (then a 408 and a close). Node's 60 s let a
 * client that sends them a byte at a time (slowloris) hold a connection a minute at a time; a browser or a
 * program sends its few hundred bytes at once.
 */
export const HEADERS_MS = 20_000;
/** How long a client has to send its whole request, headers and body (at most 1 MiB: 70 kbit/s will do). */
export const REQUEST_MS = 120_000;
/**
 * How long an idle keep-alive connection is kept for the client's next request (Node's own 5 s), so that it
 * does not hold a place under the cap meanwhile. A proxy that keeps connections to serve should drop them sooner.
 */
export const KEEP_ALIVE_MS = 5_000;
/**
 * How often Node looks for requests past HEADERS_MS and REQUEST_MS: at its 30 s, a client had up to
 * HEADERS_MS + 30 s to hold a connection with its headers unsent.
 */
export const CHECK_MS = 2_000;
/**
 * The most bytes of request headers (Node's 16 KiB, a 431 past it). Cookies go with a host, not a port:
 * other apps' on 127.0.0.1 come with the inspector's. maxHeadersCount is left at Node's 2,000: it drops the
 * headers past it without a word, where this size refuses them, and 16 KiB hold fewer than 2,000 anyway.
 */
export const MAX_HEADER_BYTES = 16 * 1024;
/**
 * The most connections serve holds at once (server.maxConnections): past it Node closes each new one at
 * once, so sockets and memory have a bound whatever clients do. Far below the descriptors Node is allowed.
 */
export const MAX_CONNECTIONS = 1024;
/**
 * The most connections one client address holds at once, past which its new ones are closed: a client that
 * opens sockets and trickles its headers takes its share, not every place, and the others are served. Behind
 * a proxy every client has the proxy's address: raise it (or the proxy's own limits do this work).
 */
export const MAX_CONNECTIONS_PER_ADDRESS = 128;

export interface ServeLimits {
  idleMs: number;
  headersMs: number;
  requestMs: number;
  keepAliveMs: number;
  checkMs: number;
  maxConnections: number;
  maxConnectionsPerAddress: number;
}

export const SERVE_LIMITS: ServeLimits = {
  idleMs: IDLE_CONNECTION_MS, headersMs: HEADERS_MS, requestMs: REQUEST_MS, keepAliveMs: KEEP_ALIVE_MS, checkMs: CHECK_MS,
  maxConnections: MAX_CONNECTIONS, maxConnectionsPerAddress: MAX_CONNECTIONS_PER_ADDRESS,
};

/** Why serve closed a connection as it came: over the cap of all connections, or of its address's. */
export type ConnectionRefusal = 'max-connections' | 'max-connections-per-address';

const CONNECTION_LINE: RefusalLine = {
  event: 'connection-refused', one: 'connection closed: over the cap of connections', many: (n) => `${n} connections closed: over the cap of connections`,
};

/** The HTTP app on a Node server, as `stepwise serve` listens (the tests too, with shorter limits). */
export function serveApp(
  app: { fetch: Parameters<typeof serve>[0]['fetch'] },
  options: { port: number; hostname: string; idleMs?: number; limits?: Partial<ServeLimits>; log?: Logger; clock?: Clock },
): Server {
  const limits = { ...SERVE_LIMITS, ...(options.idleMs !== undefined ? { idleMs: options.idleMs } : {}), ...options.limits };
  const server = serve({
    fetch: app.fetch, port: options.port, hostname: options.hostname,
    serverOptions: {
      headersTimeout: limits.headersMs, requestTimeout: limits.requestMs, keepAliveTimeout: limits.keepAliveMs,
      connectionsCheckingInterval: limits.checkMs, maxHeaderSize: MAX_HEADER_BYTES,
    },
  }) as Server;
  // Node destroys a socket idle this long (no 'timeout' listener): its answer's memory is let go with it.
  // An answer that stalled part-way takes two such periods: Node counts the write that began it as progress.
  server.setTimeout(limits.idleMs);
  server.maxConnections = limits.maxConnections;
  const refusals = options.log && options.clock ? new RefusalLog<ConnectionRefusal>(options.log, options.clock, { line: CONNECTION_LINE }) : undefined;
  server.once('close', () => refusals?.close());
  // Node closed it before any socket was made: only its address is known.
  server.on('drop', (data) => refusals?.refused({ address: data?.remoteAddress, reason: 'max-connections' }));
  const held = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return; // gone already
    const count = held.get(address) ?? 0;
    if (count >= limits.maxConnectionsPerAddress) {
      // Closed before a byte is read: an answer written now would race the request on its way, and the
      // close that followed it could reset the connection under the answer. Node's own cap closes so too.
      socket.destroy();
      refusals?.refused({ address, reason: 'max-connections-per-address' });
      return;
    }
    held.set(address, count + 1);
    socket.once('close', () => {
      const left = held.get(address)! - 1;
      if (left) held.set(address, left);
      else held.delete(address);
    });
  });
  return server;
}
