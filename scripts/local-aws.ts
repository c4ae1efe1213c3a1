/**
 * `npm run local-aws`: the AWS backend on this machine, with no account. Starts DynamoDB Local and fauxqs
 * (SQS and S3), the same servers the tests use, makes the table, bucket and FIFO queue as `stepwise init
 * --backend aws` does, and writes the environment that points the SDK and the CLI at them to a file to
 * `source` in another terminal. It stays up until Ctrl-C or SIGTERM; the servers keep everything in
 * memory, so what they held is gone when it stops, and the file is removed with them. The file is this
 * session's alone: a second session on it is refused while the first lives, since each removes it (and
 * the key and emails named after it) when it stops.
 *
 *   npm run local-aws [-- --write-env <path>]     (default .stepwise/local-aws.env)
 *
 * The npm script `exec`s node: npm passes a SIGTERM on to its script's shell, which would not pass it on
 * to this process, and the servers would outlive `kill <npm's pid>`.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_PORT } from '../lib/local/wait-services.ts';
import { awsServerEnv, startAwsServers, type AwsServers } from '../test/support/aws-servers.ts';

// The SDK's notice that its 2027 releases need Node 22 (we pin older ones), as bin/stepwise.js quiets it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const USAGE = 'usage: npm run local-aws [-- --write-env <path>]   (the exports go to .stepwise/local-aws.env by default)\n';
let values: { 'write-env'?: string; help?: boolean };
try {
  ({ values } = parseArgs({ options: { 'write-env': { type: 'string' }, help: { type: 'boolean', short: 'h' } } }));
} catch (error) {
  process.stderr.write(`local-aws: ${(error as Error).message}\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const envFile = values['write-env'] ?? '.stepwise/local-aws.env';
// SES and Secrets Manager are not among the servers: emails become files, and the links' key is a file
// made for this session. Both go with the servers, since the runs they name do. They are named after the
// env file, so a second session with a file of its own in the same folder has its own key and emails.
const stem = basename(envFile).replace(/\.env$/, '');
const keyFile = join(dirname(envFile), `${stem}-signing.key`);
const outbox = join(dirname(envFile), `${stem}-outbox`);

try {
  claimEnvFile(envFile);
} catch (error) {
  process.stderr.write(`local-aws: ${(error as Error).message}\n`);
  process.exit(2);
}

let servers: AwsServers | undefined;
let stopping = false;
const stop = async (code: number) => {
  if (stopping) return;
  stopping = true;
  for (const path of [envFile, keyFile, outbox]) rmSync(path, { force: true, recursive: true });
  await servers?.stop();
  process.exit(code);
};
// Set before the servers start, so a Ctrl-C while Java starts gives the claimed file back too.
process.once('SIGINT', () => void stop(0));
process.once('SIGTERM', () => void stop(0));

try {
  servers = await startAwsServers();
  Object.assign(process.env, awsServerEnv(servers), { STEPWISE_BACKEND: 'aws' });
  // The names `init` chooses and prints, read back from its JSON, so this makes exactly what it makes.
  const { initCommand } = await import('../lib/cli/commands/init.ts');
  let printed = '';
  await initCommand({ backend: 'aws', json: true }, (line) => { printed += line; });
  const names = JSON.parse(printed) as { tableName: string; bucketName: string; queueUrl: string };
  // Emails left by an earlier session name runs its servers took with them.
  rmSync(outbox, { force: true, recursive: true });
  writeFileSync(keyFile, randomBytes(32).toString('base64'), { mode: 0o600 });
  const env = {
    ...awsServerEnv(servers), STEPWISE_BACKEND: 'aws', TABLE_NAME: names.tableName, BUCKET_NAME: names.bucketName, QUEUE_URL: names.queueUrl,
    STEPWISE_SIGNING_KEY_FILE: resolve(keyFile), STEPWISE_OUTBOX: resolve(outbox), STEPWISE_PUBLIC_URL: `http://127.0.0.1:${DEFAULT_PORT}`,
  };
  writeFileSync(envFile, `${ownerLine()}\n${Object.entries(env).map(([name, value]) => `export ${name}=${shellWord(value)}`).join('\n')}\n`);
  const shown = show(envFile);
  console.log([
    `local AWS servers ready: DynamoDB Local ${servers.dynamodb}, SQS and S3 (fauxqs) ${servers.sqs}`,
    `  table ${names.tableName}, bucket ${names.bucketName}, queue ${names.queueUrl}`,
    `in another terminal:`,
    `  source ${shellWord(shown)}`,
    `  npm run stepwise -- start --agent examples/migrate/agent.ts --goal "copy the rows"`,
    `  npm run stepwise -- worker --agent examples/migrate/agent.ts`,
    `  npm run stepwise -- status`,
    `  npm run stepwise -- serve --agent examples/migrate/agent.ts     (the API and the approval pages; the emails are in ${show(outbox)})`,
    `everything is in memory: it is gone when this stops (Ctrl-C), and ${shown}, the emails and the links' key with it`,
  ].join('\n'));
} catch (error) {
  console.error(`local-aws: ${(error as Error).message}`);
  await stop(1);
}

/**
 * Makes the env file this session's before any server starts: created if absent; refused if a session
 * that is still running wrote it (stopping, that one would remove the file, key and emails this one uses,
 * and this one theirs); taken over if its session died without removing it (SIGKILL, a crash).
 */
function claimEnvFile(path: string): void {
  mkdirSync(dirname(path), { recursive: true });
  for (;;) {
    try {
      writeFileSync(path, `${ownerLine()}\n`, { flag: 'wx' });
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let owner: number | undefined;
    try {
      owner = Number(/^# npm run local-aws, pid (\d+)/.exec(readFileSync(path, 'utf8'))?.[1]) || undefined;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    if (owner !== undefined && owner !== process.pid && running(owner)) {
      throw new Error(`${show(path)} belongs to another npm run local-aws (pid ${owner}), still running: use that one, stop it first, or give this one a file of its own (-- --write-env <path>)`);
    }
    rmSync(path, { force: true });
  }
}

/** The env file's first line: which process the file belongs to (`source` skips it). */
function ownerLine(): string {
  return `# npm run local-aws, pid ${process.pid}: removed when it stops`;
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it runs, as another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A path as the user would type it from here: relative below the working directory, else absolute. */
function show(path: string): string {
  const fromHere = relative(process.cwd(), path);
  return fromHere.startsWith('..') || isAbsolute(fromHere) ? resolve(path) : fromHere;
}

/** A value `source` reads back as it is: quoted when it holds anything but plain path characters. */
function shellWord(value: string): string {
  return /^[\w./:@%+=,-]*$/.test(value) ? value : "'" + value.split("'").join("'\\''") + "'";
}
