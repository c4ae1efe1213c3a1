import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import type { Logger } from '../../lib/log.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { AuthThrottle } from '../../lib/http/auth-throttle.ts';
import { LongPolls } from '../../lib/http/long-polls.ts';
import { serveApp, type ServeLimits } from '../../lib/http/node-server.ts';
import { OutboxNotifier } from '../../lib/waits/outbox-notifier.ts';
import { localSigningKey } from '../../lib/waits/signing-key.ts';
import { FakeRows } from './fake-tool.ts';
import { ManualClock, start, tempDb, workerProcess } from './harness.ts';
import { outboxEmails } from './outbox.ts';
import { workVisible } from './queue-work.ts';
import { ApprovalFlowModel, waitAgent } from './wait-agent.ts';

export const API_TOKEN = 'test-token-123';

/**
 * An app on a real socket at a free port of 127.0.0.1, as `stepwise serve` listens: its URL, and how to close it.
 * `serve` gives serveApp's other options: limits, and the log and clock of refused connections.
 */
export async function listen(app: Parameters<typeof serveApp>[0], idleMs?: number, serve: Omit<Parameters<typeof serveApp>[1], 'port' | 'hostname' | 'idleMs'> = {}): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server = serveApp(app, { port: 0, hostname: '127.0.0.1', ...(idleMs !== undefined ? { idleMs } : {}), ...serve });
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * The HTTP app over a real socket, on a SQLite runtime with a hand-moved clock, plus a worker to drive runs.
 * `throttle` gives it `stepwise serve`'s throttle of refused requests, on that clock.
 */
export async function startHttpApp(options: { approvers?: string[]; stopping?: AbortSignal; log?: Logger; idleMs?: number; throttle?: ConstructorParameters<typeof AuthThrottle>[1]; limits?: Partial<ServeLimits>; longPolls?: number } = {}) {
  const db = tempDb();
  const dir = join(db.path, '..');
  const clock = new ManualClock();
  const dropped: string[] = [];
  const worker = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), dropped, undefined, options.approvers), model: new ApprovalFlowModel(), clock, workerId: 'worker-A' });
  const signingKey = localSigningKey(join(dir, 'signing.key'));
  const deps: EngineDeps = {
    ...worker.deps,
    waits: { notifier: new OutboxNotifier(join(dir, 'outbox')), signingKey, publicUrl: 'http://placeholder', events: worker.runtime.events },
  };
  const throttle = options.throttle ? new AuthThrottle(clock, options.throttle) : undefined;
  const longPolls = options.longPolls !== undefined ? new LongPolls(options.longPolls) : undefined;
  const app = createHttpApp({
    store: worker.runtime.store, blobs: worker.runtime.blobs, queue: worker.runtime.queue, clock, workerId: 'api', codeVersion: 'test',
    log: options.log ?? worker.deps.log, agent: worker.deps.agent, signingKey, events: worker.runtime.events, apiToken: API_TOKEN,
    ...(options.stopping ? { stopping: options.stopping } : {}), ...(throttle ? { authThrottle: throttle } : {}),
    ...(longPolls ? { longPolls } : {}),
  });
  const { url, server, close } = await listen(app, options.idleMs, { log: options.log ?? worker.deps.log, clock, ...(options.limits ? { limits: options.limits } : {}) });
  deps.waits!.publicUrl = url;
  return {
    url, server, clock, deps, runtime: worker.runtime, dir, dropped, signingKey, throttle, longPolls,
    api: (path: string, init: RequestInit = {}) => fetch(`${url}${path}`, { ...init, headers: { authorization: `Bearer ${API_TOKEN}`, 'content-type': 'application/json', ...(init.headers ?? {}) } }),
    close: async () => {
      await close();
      worker.runtime.close();
      db.cleanup();
    },
  };
}

/**
 * A run of the app's approval agent, started and worked until it waits for its approval: the version it
 * waits at and the link its email holds. Throws unless it is waiting.
 */
export async function runWaitingForApproval(app: Awaited<ReturnType<typeof startHttpApp>>, runId = 'run'): Promise<{ link: string; version: number }> {
  await start(app.deps, 'copy, then drop old_rows with approval', runId);
  await workVisible(app.deps, app.runtime);
  const stored = (await app.runtime.store.load(runId))!;
  const status = decodeState(stored).status;
  if (status !== 'waiting') throw new Error(`run ${runId} is ${status}, not waiting for its approval`);
  const email = outboxEmails(join(app.dir, 'outbox')).find((e) => e.text.includes(`Run: ${runId} `));
  if (!email) throw new Error(`no approval email for run ${runId}`);
  return { link: email.link, version: stored.version };
}
