import { once } from 'node:events';
import { Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { shapeResult } from '../../lib/core/result.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { MAX_RUN_WAIT_SECONDS } from '../../lib/http/api-routes.ts';
import { IDLE_CONNECTION_MS } from '../../lib/http/node-server.ts';
import { createLogger } from '../../lib/log.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';
import { META, newState, recordFor } from '../support/states.ts';

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

  it('closes a connection whose client stopped reading a large answer, letting go of the answer, where it held it as long as the client lived', { timeout: 60_000 }, async () => {
    // The serve's limit outlasts a long poll, which sends nothing for up to its waitSeconds.
    expect(IDLE_CONNECTION_MS).toBeGreaterThan(MAX_RUN_WAIT_SECONDS * 1000);
    app = await startHttpApp({ idleMs: 300 });
    // A step whose whole output is 32 MB: more than the socket buffers of both ends hold.
    const whole = 'row written\n'.repeat(2_800_000);
    const shaped = shapeResult(whole, true);
    await app.runtime.blobs.put(shaped.blob!.ref, shaped.blob!.data);
    const record = { ...recordFor('big-output', 1), result: shaped.result };
    const state = { ...newState('big-output'), agent: app.deps.agent.name };
    await app.runtime.store.create(state, META);
    await app.runtime.store.commit({ runId: 'big-output', expectedVersion: 1, state: completeStep(state, record, 5_000), appended: record, ...META });

    const socket = await connect(app.url);
    let received = 0;
    socket.on('data', (chunk: Buffer) => { received += chunk.length; });
    // The client reads the answer's first bytes, then nothing more.
    const first = once(socket, 'data');
    socket.write(`GET /runs/big-output/steps/1?full=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${API_TOKEN}\r\n\r\n`);
    const [head] = await first as [Buffer];
    socket.pause();
    const length = Number(/content-length: (\d+)/i.exec(String(head))![1]);
    expect(length).toBeGreaterThan(whole.length);
    // The server lets go of the connection, and of the rest of the answer with it.
    await vi.waitFor(async () => {
      const open = await new Promise<number>((resolve, reject) => app!.server.getConnections((error, n) => (error ? reject(error) : resolve(n))));
      expect(open).toBe(0);
    }, { timeout: 30_000, interval: 100 });
    const closed = once(socket, 'close');
    socket.resume();
    await closed;
    expect(received).toBeLessThan(length);
  });

  it('refuses a request without the token before reading its body, where it read a chunked body whole (up to 1 MiB) first', async () => {
    app = await startHttpApp();
    for (const path of ['/runs', '/events', '/inspect/runs/r/cancel']) {
      const socket = await connect(app.url);
      try {
        // Chunked, so no Content-Length tells the app its size: the body goes on, and never ends.
        const answered = once(socket, 'data');
        socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n`);
        const [head] = await answered as [Buffer];
        expect(String(head).split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized');
      } finally {
        socket.destroy();
      }
    }
  });
});
