/**
 * `npm run local-aws`: the AWS backend on this machine, with no account. Starts DynamoDB Local and fauxqs
 * (SQS and S3), the same servers the tests use, makes the table, bucket and FIFO queue as `stepwise init
 * --backend aws` does, and writes the environment that points the SDK and the CLI at them to a file to
 * `source` in another terminal. It stays up until Ctrl-C or SIGTERM; the servers keep everything in
 * memory, so what they held is gone when it stops, and the file is removed with them.
 *
 *   npm run local-aws [-- --write-env <path>]     (default .stepwise/local-aws.env)
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_PORT } from '../lib/local/wait-services.ts';
import { awsServerEnv, startAwsServers } from '../test/support/aws-servers.ts';

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
// made for this session. Both go with the servers, since the runs they name do.
const keyFile = join(dirname(envFile), 'local-aws-signing.key');
const outbox = join(dirname(envFile), 'local-aws-outbox');

const servers = await startAwsServers();
let stopping = false;
const stop = async (code: number) => {
  if (stopping) return;
  stopping = true;
  for (const path of [envFile, keyFile, outbox]) rmSync(path, { force: true, recursive: true });
  await servers.stop();
  process.exit(code);
};
process.once('SIGINT', () => void stop(0));
process.once('SIGTERM', () => void stop(0));

try {
  Object.assign(process.env, awsServerEnv(servers), { STEPWISE_BACKEND: 'aws' });
  // The names `init` chooses and prints, read back from its JSON, so this makes exactly what it makes.
  const { initCommand } = await import('../lib/cli/commands/init.ts');
  let printed = '';
  await initCommand({ backend: 'aws', json: true }, (line) => { printed += line; });
  const names = JSON.parse(printed) as { tableName: string; bucketName: string; queueUrl: string };
  mkdirSync(dirname(envFile), { recursive: true });
  // Emails left by an earlier session name runs its servers took with them.
  rmSync(outbox, { force: true, recursive: true });
  writeFileSync(keyFile, randomBytes(32).toString('base64'), { mode: 0o600 });
  const env = {
    ...awsServerEnv(servers), STEPWISE_BACKEND: 'aws', TABLE_NAME: names.tableName, BUCKET_NAME: names.bucketName, QUEUE_URL: names.queueUrl,
    STEPWISE_SIGNING_KEY_FILE: resolve(keyFile), STEPWISE_OUTBOX: resolve(outbox), STEPWISE_PUBLIC_URL: `http://127.0.0.1:${DEFAULT_PORT}`,
  };
  writeFileSync(envFile, `${Object.entries(env).map(([name, value]) => `export ${name}=${shellWord(value)}`).join('\n')}\n`);
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

/** A path as the user would type it from here: relative below the working directory, else absolute. */
function show(path: string): string {
  const fromHere = relative(process.cwd(), path);
  return fromHere.startsWith('..') || isAbsolute(fromHere) ? resolve(path) : fromHere;
}

/** A value `source` reads back as it is: quoted when it holds anything but plain path characters. */
function shellWord(value: string): string {
  return /^[\w./:@%+=,-]*$/.test(value) ? value : "'" + value.split("'").join("'\\''") + "'";
}
