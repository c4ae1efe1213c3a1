import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { InvalidInputError } from '../core/errors.ts';
import { shellWord } from './format.ts';
import type { BlobStore, CheckpointStore, EventBuffer, IdempotencyLedger, RunQueue, RunQueueConsumer } from '../ports.ts';
import { DEFAULT_DB_PATH, expandHome } from '../local/paths.ts';
import type { LocalRuntime } from '../local/runtime.ts';
import type { WaitServices } from '../waits/services.ts';
import type { AwsResource } from '../aws/check-resources.ts';
import type { AwsRuntime } from '../aws/runtime.ts';
import type { Logger } from '../log.ts';

export interface CliOptions {
  db?: string;
  agent?: string;
  /** 'local' (SQLite, the default) or 'aws' (DynamoDB, S3, SQS); or STEPWISE_BACKEND. */
  backend?: string;
  /** A deployed stepwise stack whose outputs name the table, bucket and queue (or STEPWISE_STACK). */
  stack?: string;
  table?: string;
  bucket?: string;
  queueUrl?: string;
}

/** What the commands need from a backend: the same engine ports, whichever it is. */
export interface Backend {
  kind: 'local' | 'aws';
  store: CheckpointStore;
  blobs: BlobStore;
  ledger: IdempotencyLedger;
  queue: RunQueue & RunQueueConsumer;
  /** The local runtime, for what only it can do (a queue consumer for one run, pruning). */
  local?: LocalRuntime;
  /** The AWS runtime, for what only it can do (the blob sweep). */
  aws?: AwsRuntime;
  /** Emails, approval links, kept events: what waiting runs need on this backend. */
  waits: WaitServices & { events: EventBuffer };
  /** On AWS, from a stack's AgentNames output: the agent whose workers read the queue (queue-agent.ts). */
  queueAgent?: QueueAgent;
  close(): void;
}

/** The agent a queue is for: its name, then its former names, and what said so. */
export interface QueueAgent {
  names: readonly string[];
  source: string;
}

/**
 * The options that chose this command's store, as flags for a next command it prints (` --db 'my runs.db'`),
 * so that command, pasted, reads the same store. What the environment chose it reads again by itself.
 */
export function storeFlags(options: CliOptions): string {
  const flags: [string, string | undefined][] = [
    ['--db', options.db], ['--backend', options.backend], ['--stack', options.stack],
    ['--table', options.table], ['--bucket', options.bucket], ['--queue-url', options.queueUrl],
  ];
  return flags.filter(([, value]) => value !== undefined).map(([flag, value]) => ` ${flag} ${shellWord(value!)}`).join('');
}

export function dbPath(options: CliOptions): string {
  // An empty STEPWISE_DB (exported but unset) names no file, as an empty STEPWISE_BACKEND names no backend:
  // SQLite would open "" as a private temporary database, deleted on close, so a run started in it is lost.
  return expandHome(options.db ?? (process.env.STEPWISE_DB?.trim() || DEFAULT_DB_PATH));
}

/**
 * Each backend's modules are imported only when it is the one asked for: the AWS SDK is a large import.
 * On AWS, `uses` are checked to exist first (one round of calls), so a missing table or queue is a
 * one-line error before the command writes anything. Locally the SQLite file is made only by a command
 * that may begin its contents (`create`: start, worker, serve, emit); the others need it there, as the AWS
 * ones need the table, so a mistyped --db is an error, not an empty store made at that path. A command that
 * only reads (`readOnly`: status, history, show, drift) leaves the file as it is, layout and all.
 */
export async function openBackend(
  options: CliOptions, uses: readonly AwsResource[] = ['table'], { create = false, readOnly = false, log }: { create?: boolean; readOnly?: boolean; log?: Logger } = {},
): Promise<Backend> {
  const kind = backendKind(options);
  if (kind === 'local') {
    const path = dbPath(options);
    if (!create && !existsSync(path)) {
      const where = resolve(path) === path ? path : `${path} (${resolve(path)})`;
      throw new InvalidInputError(`no stepwise database at ${where}: check --db or STEPWISE_DB; stepwise run, start or init makes one`);
    }
    const [{ openLocalRuntime }, { localWaitServices }] = await Promise.all([import('../local/runtime.ts'), import('../local/wait-services.ts')]);
    // `log`: where the file's queue and ledger say a step back of the clock they found (a worker's, naming it).
    const local = openLocalRuntime({ dbPath: path, readOnly, ...(log ? { log } : {}) });
    const waits = { ...localWaitServices(local, path), events: local.events };
    return { kind, store: local.store, blobs: local.blobs, ledger: local.ledger, queue: local.queue, local, waits, close: () => local.close() };
  }
  const [{ openAwsRuntime }, { awsWaitServices }, { assertAwsConfigured, assertResourcesExist, UnreachableEndpointError }, { OutboxNotifier }, { createLogger }] = await Promise.all([
    import('../aws/runtime.ts'), import('../aws/wait-services.ts'), import('../aws/check-resources.ts'), import('../waits/outbox-notifier.ts'), import('../log.ts'),
  ]);
  await assertAwsConfigured();
  const stack = stackName(options);
  const deployed = stack ? await (await import('../aws/stack-outputs.ts')).readStackOutputs(stack) : undefined;
  // A flag names one resource on purpose; the stack fills in the rest; the environment comes last.
  const tableName = options.table ?? deployed?.tableName;
  const bucketName = options.bucket ?? deployed?.bucketName;
  const queueUrl = options.queueUrl ?? deployed?.queueUrl;
  const aws = openAwsRuntime({
    // A command that moves runs writes checkpoints, and a large one spills to the bucket: it needs the
    // bucket named even when it does not probe it. One that only reads needs the table alone.
    needs: uses.includes('queue') ? ['table', 'bucket', 'queue'] : uses,
    ...(tableName ? { tableName } : {}), ...(bucketName ? { bucketName } : {}), ...(queueUrl ? { queueUrl } : {}),
  });
  let waits: ReturnType<typeof awsWaitServices>;
  try {
    // Approval links point at the stack's API unless STEPWISE_PUBLIC_URL says otherwise.
    const env = deployed?.apiUrl && !process.env.STEPWISE_PUBLIC_URL ? { ...process.env, STEPWISE_PUBLIC_URL: deployed.apiUrl } : process.env;
    try {
      waits = awsWaitServices(aws, env, { outbox: (dir) => new OutboxNotifier(dir), log: createLogger() });
    } catch (error) {
      // Exports left from a stopped `npm run local-aws` name servers that are gone and the signing key file
      // it removed: the servers are what to start again, not a key to make by hand. Any other refusal of
      // the resources comes after the settings' own (two key sources set, say).
      await assertResourcesExist(aws.clients, aws, uses).catch((refusal: unknown) => {
        if (refusal instanceof UnreachableEndpointError) throw refusal;
      });
      throw error;
    }
    await assertResourcesExist(aws.clients, aws, uses);
  } catch (error) {
    aws.close();
    throw error;
  }
  // The stack's queue is its agent's, unless --queue-url named another one.
  const queueAgent = deployed?.agentNames && !options.queueUrl ? { names: deployed.agentNames, source: `stack ${deployed.stackName}` } : undefined;
  return {
    kind, store: aws.store, blobs: aws.blobs, ledger: aws.ledger, queue: aws.queue, aws, waits: { ...waits, events: waits.events! },
    ...(queueAgent ? { queueAgent } : {}), close: () => aws.close(),
  };
}

/** --backend, else STEPWISE_BACKEND, else aws when a stack is named, else local. */
export function backendKind(options: CliOptions): 'local' | 'aws' {
  const kind = options.backend ?? (process.env.STEPWISE_BACKEND?.trim() || undefined) ?? (stackName(options) ? 'aws' : 'local');
  if (kind !== 'local' && kind !== 'aws') throw new InvalidInputError(`${options.backend !== undefined ? '--backend' : 'STEPWISE_BACKEND'} must be local or aws, got ${JSON.stringify(kind)}`);
  if (kind === 'local' && options.stack) throw new InvalidInputError(`--stack names a deployed AWS stack; it does not go with --backend local`);
  return kind;
}

/** --stack, else STEPWISE_STACK (on the AWS backend only: a local run ignores a stack set in the environment). */
function stackName(options: CliOptions): string | undefined {
  return options.stack ?? (process.env.STEPWISE_STACK?.trim() || undefined);
}
