import { awsServerEnv, startAwsServers } from './aws-servers.ts';

/**
 * Vitest global setup: starts DynamoDB Local and fauxqs once for the whole run and hands their endpoints
 * to every test worker through the SDK's standard environment variables (workers are forked after this
 * runs and inherit process.env). Skipped when the run is clearly limited to other folders
 * (`vitest run test/local`), or with STEPWISE_AWS_SERVERS=off.
 */
export default async function setup(): Promise<() => Promise<void>> {
  if (!needed()) return async () => undefined;
  const servers = await startAwsServers();
  Object.assign(process.env, awsServerEnv(servers));
  return async () => {
    await servers.stop();
  };
}

function needed(): boolean {
  if (process.env.STEPWISE_AWS_SERVERS === 'off') return false;
  // Positional arguments that are all test paths outside test/aws: nothing here needs the servers.
  // Anything else (no filter, an option value, a file name pattern) starts them, to be safe.
  const positional = process.argv.slice(2).filter((arg) => !arg.startsWith('-') && !['run', 'watch', 'related', 'bench'].includes(arg));
  const onlyOtherTests = positional.length > 0 && positional.every((arg) => arg.startsWith('test/') && !arg.includes('aws'));
  return !onlyOtherTests;
}
