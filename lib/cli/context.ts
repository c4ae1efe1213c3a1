import { hostname, userInfo } from 'node:os';
import type { AwsRuntime } from '../aws/runtime.ts';
import type { OperateDeps } from '../engine/operate/deps.ts';
import { loadAgent, type AgentDefinition } from '../agent.ts';
import type { EngineDeps } from '../engine/deps.ts';
import { createLogger } from '../log.ts';
import { DEFAULT_DB_PATH, openLocalRuntime, type LocalRuntime } from '../local/runtime.ts';
import { InvalidInputError } from '../core/errors.ts';
import { DEFAULT_MODEL, MODEL_ENV } from '../llm/anthropic.ts';
import { selectModel } from '../llm/select-model.ts';
import type { BlobStore, CheckpointStore, EventBuffer, IdempotencyLedger, Model, RunQueue, RunQueueConsumer } from '../ports.ts';
import { localWaitServices } from '../local/wait-services.ts';
import type { WaitServices } from '../waits/services.ts';
import { systemClock } from '../ports.ts';
import { CODE_VERSION } from '../version.ts';

export interface CliOptions {
  db?: string;
  agent?: string;
  /** 'local' (SQLite, the default) or 'aws' (DynamoDB, S3, SQS); or STEPWISE_BACKEND. */
  backend?: string;
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
  close(): void;
}

export function dbPath(options: CliOptions): string {
  return options.db ?? process.env.STEPWISE_DB ?? DEFAULT_DB_PATH;
}

export async function openBackend(options: CliOptions): Promise<Backend> {
  const kind = options.backend ?? process.env.STEPWISE_BACKEND ?? 'local';
  if (kind === 'local') {
    const path = dbPath(options);
    const local = openLocalRuntime({ dbPath: path });
    const waits = { ...localWaitServices(local, path), events: local.events };
    return { kind, store: local.store, blobs: local.blobs, ledger: local.ledger, queue: local.queue, local, waits, close: () => local.close() };
  }
  if (kind === 'aws') {
    // Loaded only when asked for: the AWS SDK is a large import the local default does not need.
    const { openAwsRuntime } = await import('../aws/runtime.ts');
    const { awsWaitServices } = await import('../aws/wait-services.ts');
    const aws = openAwsRuntime({
      ...(options.table ? { tableName: options.table } : {}),
      ...(options.bucket ? { bucketName: options.bucket } : {}),
      ...(options.queueUrl ? { queueUrl: options.queueUrl } : {}),
    });
    const waits = awsWaitServices(aws);
    return { kind, store: aws.store, blobs: aws.blobs, ledger: aws.ledger, queue: aws.queue, aws, waits: { ...waits, events: waits.events! }, close: () => aws.close() };
  }
  throw new InvalidInputError(`--backend must be local or aws, got ${JSON.stringify(kind)}`);
}

export const workerId = (): string => `${hostname()}-${process.pid}`;

export async function requireAgent(options: CliOptions): Promise<AgentDefinition> {
  const path = options.agent ?? process.env.STEPWISE_AGENT;
  if (!path) throw new InvalidInputError('--agent path/to/agent.ts is required (or set STEPWISE_AGENT)');
  return loadAgent(path);
}

/** The model for a run: Claude with an API key, else the agent's offline model, labelled as such. */
export function chooseModel(agent: AgentDefinition): { model: Model; label: string } {
  return selectModel(agent);
}

/** The model to price usage by when a step did not record one. */
export function pricingModel(): string {
  return process.env[MODEL_ENV]?.trim() || DEFAULT_MODEL;
}

/** What operating runs by hand needs (show, fork, retry, cancel): the ports, no agent, no model. */
export function operateDeps(runtime: Backend): OperateDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: systemClock,
    workerId: `cli-${workerId()}`, codeVersion: CODE_VERSION, log: createLogger(),
  };
}

/** Who is at this terminal, for a cancel's record when --as does not say. */
export function operator(): string {
  try {
    return `${userInfo().username}@${hostname()}`;
  } catch {
    return `cli@${hostname()}`;
  }
}

export function engineDeps(runtime: Backend, agent: AgentDefinition, model: Model, id = workerId()): EngineDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
    model, agent, clock: systemClock, workerId: id, codeVersion: CODE_VERSION,
    log: createLogger(), waits: runtime.waits,
  };
}
