import { once } from 'node:events';
import { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../lib/log.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';

/** A raw connection to the app, for what fetch will not send: a body cut off, a client that never reads. */
async function connect(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  const socket = new Socket();
  socket.connect(Number(port), hostname);
  await once(socket, 'connect');
  return socket;
}

describe('the HTTP app under careless or hostile clients', () => {
  let app: Awaited<ReturnType<typeof startHttpApp>> | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('a client that goes away in the middle of a chunked body is no failed request of its own: no error line', async () => {
    const lines: string[] = [];
    app = await startHttpApp({ log: createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } }) });
    // A streamed upload (fetch with a stream body, curl -T -) cut off: its client timed out, or was stopped.
    for (const path of ['/runs', '/events', '/approvals/not-a-link']) {
      const socket = await connect(app.url);
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${API_TOKEN}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"goa\r\n`);
      // Wait for the app to have the request in hand (its body read begun): the app answers /health in order after it.
      await (await fetch(`${app.url}/health`)).text();
      socket.destroy();
    }
    // One request more, answered after the three cut-off requests' handlers have run to their end.
    await (await fetch(`${app.url}/health`)).text();
    await new Promise((r) => setTimeout(r, 100));
    expect(lines.filter((l) => /"level":"error"|http-error/.test(l))).toEqual([]);
  });
});
