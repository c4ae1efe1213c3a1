import { readdirSync } from 'node:fs';
import { join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { awsServerEnv, startAwsServers } from './aws-servers.ts';

/**
 * Vitest global setup: starts DynamoDB Local and fauxqs once for the whole run and hands their endpoints
 * to every test worker through the SDK's standard environment variables (workers are forked after this
 * runs and inherit process.env). Skipped when the files a run selects include none that uses them
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

/** The repository's root, with its trailing separator. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function needed(): boolean {
  if (process.env.STEPWISE_AWS_SERVERS === 'off') return false;
  const positional = process.argv.slice(2).filter((arg) => !arg.startsWith('-') && !['run', 'watch', 'related', 'bench'].includes(arg));
  return serversNeeded(positional, testFiles());
}

/**
 * Whether the test files a run selects include one that talks to the servers (an `aws` in its path:
 * test/aws, test/chaos/aws-*, test/fuzz/aws-*). Vitest selects by its positional filters, each matching
 * the files whose path contains it: `test/chaos` selects the AWS chaos tests too, where a rule on the
 * filter's own name once skipped the servers for them. No filter: every file, so the servers start; so do
 * they for a word that selects no file, which may be an option's value (`--reporter json`), not a filter.
 */
export function serversNeeded(filters: readonly string[], files: readonly string[], root = ROOT): boolean {
  // `file.test.ts:12` (a line) filters by the file; an absolute path selects as the same path from the root.
  const paths = filters.map((filter) => filter.replace(/:\d+$/, '').replace(/^\.\//, '').replace(root, ''));
  const selected = (path: string) => files.filter((file) => file.includes(path));
  if (!paths.length || paths.some((path) => !selected(path).length)) return true;
  return paths.some((path) => selected(path).some((file) => file.includes('aws')));
}

/** The repository's test files, as paths from its root (test/...). */
export function testFiles(): string[] {
  return (readdirSync(join(ROOT, 'test'), { recursive: true }) as string[])
    .filter((file) => file.endsWith('.test.ts'))
    .map((file) => `test/${file.split(sep).join('/')}`);
}
