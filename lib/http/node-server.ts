import type { Server } from 'node:http';
import { serve } from '@hono/node-server';

/**
 * How long a connection of `stepwise serve` may go with no byte moving either way before it is closed:
 * a client that stopped reading its answer (a step's whole output, megabytes) held the answer in serve's
 * memory and its socket for as long as the client lived, since Node sets no such limit. Longer than a long
 * poll of GET /runs/:id waits with nothing to send, and than any request takes to answer.
 */
export const IDLE_CONNECTION_MS = 60_000;

/** The HTTP app on a Node server, as `stepwise serve` listens (the tests too, with a shorter idle limit). */
export function serveApp(
  app: { fetch: Parameters<typeof serve>[0]['fetch'] },
  options: { port: number; hostname: string; idleMs?: number },
): Server {
  const server = serve({ fetch: app.fetch, port: options.port, hostname: options.hostname }) as Server;
  // Node destroys a socket idle this long (no 'timeout' listener): its answer's memory is let go with it.
  // An answer that stalled part-way takes two such periods: Node counts the write that began it as progress.
  server.setTimeout(options.idleMs ?? IDLE_CONNECTION_MS);
  return server;
}
