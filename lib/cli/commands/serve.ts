import { randomBytes } from 'node:crypto';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { InvalidInputError } from '../../core/errors.ts';
import { createHttpApp } from '../../http/app.ts';
import { MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS, serveApp, type ServeLimits } from '../../http/node-server.ts';
import { AuthThrottle } from '../../http/auth-throttle.ts';
import { LongPolls, longPollsPerAddress } from '../../http/long-polls.ts';
import { createLogger } from '../../log.ts';
import { DEFAULT_PORT } from '../../local/wait-services.ts';
import { databaseDir } from '../../local/paths.ts';
import { systemClock, type Notifier } from '../../ports.ts';
import { EMAIL_FROM_ENV, OUTBOX_ENV, PUBLIC_URL_ENV, SIGNING_KEY_FILE_ENV, SIGNING_KEY_SECRET_ENV } from '../../settings.ts';
import { OutboxNotifier } from '../../waits/outbox-notifier.ts';
import { publicUrlOf } from '../../waits/public-url.ts';
import { CODE_VERSION } from '../../version.ts';
import { dbPath, openBackend, requireAgent, workerId, type CliOptions } from '../context.ts';
import { assertQueueTakesAgent } from '../queue-agent.ts';
import { onStopSignals } from '../stop-signals.ts';
import { makeDir } from '../../make-dir.ts';

/** How long serve, stopped, waits for the requests in hand before it cuts their connections. */
export const SERVE_STOP_GRACE_MS = 5_000;

export interface ServeOptions extends CliOptions {
  port?: number;
  host?: string;
  /** The most connections held at once, and from one client address (node-server.ts). */
  maxConnections?: number;
  maxConnectionsPerAddress?: number;
}

/**
 * The API and the approval pages on this machine: the same app API Gateway serves on AWS. Program routes
 * want the bearer token in `<db dir>/api-token` (or STEPWISE_API_TOKEN); approval pages are opened from
 * the links in the outbox emails. Runs until SIGINT/SIGTERM.
 */
export async function serveCommand(options: ServeOptions, out: (line: string) => void): Promise<number> {
  const givenToken = givenApiToken(process.env);
  const limits = connectionLimits(options);
  // Before the agent loads, and so before the line a supervisor waits for: a SIGTERM sent on reading that
  // line found no handler yet and killed the process outright, mid-way through its start lines, with no
  // "stopped"; one sent while the agent loaded to a serve that is PID 1 was lost, and it served on.
  let stopAsked = false;
  const stopped = new Promise<void>((resolve) => onStopSignals((signal) => {
    // Said at once, as worker and run say it: a request in hand may hold serve for its grace.
    out(`stopping (${signal}): requests in hand get ${SERVE_STOP_GRACE_MS / 1000} s to finish; ${signal} again stops at once`);
    stopAsked = true;
    resolve();
  }));
  const agent = await requireAgent(options);
  const backend = await openBackend(options, ['table', 'queue', 'bucket'], { create: true });
  try {
    assertQueueTakesAgent(backend, agent, 'start');
  } catch (error) {
    backend.close();
    throw error;
  }
  if (stopAsked) {
    backend.close();
    out('stopped before it served');
    return 0;
  }
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? DEFAULT_PORT;
  // Beside the database file itself, as the signing key is: the same token whichever path names the file.
  const tokenFile = join(databaseDir(dbPath(options)), 'api-token');
  const apiToken = givenToken ?? localApiToken(tokenFile);
  if (!backend.waits.signingKey) throw new InvalidInputError(`no approval signing key is configured: on the AWS backend set ${SIGNING_KEY_SECRET_ENV} (a Secrets Manager secret) or ${SIGNING_KEY_FILE_ENV} (a file)`);
  // A proxy serving the app under STEPWISE_PUBLIC_URL's path takes it off: the inspector's links put it back.
  const pathPrefix = new URL(publicUrlOf(process.env) ?? 'http://127.0.0.1').pathname.replace(/\/+$/, '');
  const stopping = new AbortController();
  const log = createLogger({ service: 'stepwise-api', agent: agent.name });
  const app = createHttpApp({
    store: backend.store, blobs: backend.blobs, queue: backend.queue, clock: systemClock, workerId: `api-${workerId()}`,
    codeVersion: CODE_VERSION, log, agent, signingKey: backend.waits.signingKey,
    events: backend.waits.events, ...(backend.waits.notifier ? { notifier: backend.waits.notifier } : {}), apiToken, authThrottle: new AuthThrottle(systemClock),
    longPolls: new LongPolls(longPollsPerAddress(limits.maxConnectionsPerAddress)),
    // On AWS the queue is this agent's alone, as behind API Gateway: its API operates only its own runs.
    agentQueue: backend.kind === 'aws',
    ...(pathPrefix ? { pathPrefix } : {}), stopping: stopping.signal,
  });
  const server = serveApp(app, { port, hostname: host, log, clock: systemClock, limits });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', () => resolve());
    server.once('error', (error) => reject(new InvalidInputError(`cannot listen on ${host}:${port}: ${(error as Error).message}`)));
  });
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  out(`serving agent ${agent.name} on http://${host}:${bound} (API token in ${process.env.STEPWISE_API_TOKEN ? 'STEPWISE_API_TOKEN' : tokenFile}; approval emails ${emailsGo(backend.waits.notifier)})`);
  if (backend.kind === 'local') {
    const elsewhere = linksElsewhere(host, bound);
    if (elsewhere) out(elsewhere);
  }
  await stopped;
  stopping.abort();
  // close() stops listening and ends idle keep-alive connections, then waits for each request in hand: a
  // client that sent its headers and trickles (or never sends) its body held serve after SIGTERM for good.
  // Requests get a few seconds to finish; then their connections are cut, as a second signal would.
  const cut = setTimeout(() => server.closeAllConnections(), SERVE_STOP_GRACE_MS);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  clearTimeout(cut);
  backend.close();
  out('stopped');
  return 0;
}

/**
 * The caps of connections given: one address's defaults to no more than all of them, and may not be set over.
 */
function connectionLimits(options: ServeOptions): Pick<ServeLimits, 'maxConnections' | 'maxConnectionsPerAddress'> {
  const maxConnections = options.maxConnections ?? MAX_CONNECTIONS;
  const given = options.maxConnectionsPerAddress;
  if (given !== undefined && given > maxConnections) {
    throw new InvalidInputError(`--max-connections-per-address (${given}) is over --max-connections (${maxConnections}${options.maxConnections === undefined ? ', the default' : ''}): one address cannot hold more than every connection`);
  }
  return { maxConnections, maxConnectionsPerAddress: given ?? Math.min(MAX_CONNECTIONS_PER_ADDRESS, maxConnections) };
}

/**
 * The workers make the approval links, from STEPWISE_PUBLIC_URL (default http://127.0.0.1:8787), not from
 * this command's flags: served on another port with the setting unset, every emailed link pointed where
 * nothing answered, and nothing said so. Said at start, with the setting that fixes it.
 */
function linksElsewhere(host: string, port: number): string | undefined {
  if (process.env[PUBLIC_URL_ENV]?.trim()) return undefined; // empty, the links take the default too
  const anyHost = host === '0.0.0.0' || host === '::';
  if (port === DEFAULT_PORT && (anyHost || host === '127.0.0.1' || host === 'localhost')) return undefined;
  const reach = anyHost ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  return `approval links point at http://127.0.0.1:${DEFAULT_PORT} (${PUBLIC_URL_ENV} is not set), not here: start the workers and \`stepwise run\` with ${PUBLIC_URL_ENV}=http://${reach}:${port}${port === DEFAULT_PORT ? '' : `, or serve on --port ${DEFAULT_PORT}`}`;
}

/** Where the workers' approval emails go, as far as this process's settings tell. */
function emailsGo(notifier: Notifier | undefined): string {
  if (notifier instanceof OutboxNotifier) return `in ${notifier.dir}`;
  if (notifier) return 'sent by SES';
  return `not sent (neither ${EMAIL_FROM_ENV} nor ${OUTBOX_ENV} is set): answer with \`stepwise approve\``;
}

/** A random token kept beside the database, made once, readable by its owner only. */
/** The shortest STEPWISE_API_TOKEN serve takes; the one it makes itself is 32 characters. */
export const MIN_API_TOKEN = 16;

/**
 * STEPWISE_API_TOKEN, if set: the one lock on the API and the inspector, which may listen beyond this host
 * (--host 0.0.0.0). A short one ("secret", "1234") is guessed in a few tries, and was taken all the same.
 */
function givenApiToken(env: NodeJS.ProcessEnv): string | undefined {
  const token = env.STEPWISE_API_TOKEN?.trim();
  if (!token) return undefined;
  if (token.length < MIN_API_TOKEN) {
    throw new InvalidInputError(`STEPWISE_API_TOKEN is ${token.length} characters; it is the API's and the inspector's only lock, so give at least ${MIN_API_TOKEN} (head -c 24 /dev/urandom | base64), or leave it unset for the token serve keeps in a file`);
  }
  return token;
}

export function localApiToken(path: string): string {
  makeDir(dirname(path));
  try {
    writeFileSync(path, randomBytes(24).toString('base64url'), { flag: 'wx', mode: 0o600 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  chmodSync(path, 0o600);
  const token = readFileSync(path, 'utf8').trim();
  // No token turns the check off (createHttpApp), and an empty file is easily had: emptied by hand, or read
  // by a second serve between the first one's create and write. Refused, rather than serving runs to anyone.
  if (!token) throw new InvalidInputError(`the API token file ${path} is empty: delete it, and the next serve makes a new one`);
  return token;
}
