/**
 * The few interfaces the engine needs. Each backend (lib/local, lib/aws) implements them; nothing in
 * lib/core or lib/engine knows which backend it runs on.
 */
import type { StoredCheckpoint } from './core/codec.ts';
import type { PromptBlock } from './core/prompt.ts';
import type { Decision, RunState, RunStatus, StepRecord, Usage } from './core/state.ts';

export interface WriteMeta {
  workerId: string;
  codeVersion: string;
}

export interface CheckpointWrite extends WriteMeta {
  runId: string;
  /** The version this write was based on; the write fails with StaleVersionError if it is not the latest. */
  expectedVersion: number;
  state: RunState;
  /** The step this checkpoint completes, written once and kept for the run's life. */
  appended?: StepRecord;
}

export interface CommitResult {
  version: number;
  /** Bytes written by this checkpoint (head plus the appended step). */
  bytes: number;
}

/** One row of a run's checkpoint timeline. */
export interface CheckpointInfo {
  runId: string;
  version: number;
  step: number;
  status: RunStatus;
  tool?: string;
  idempotencyKey?: string;
  workerId: string;
  codeVersion: string;
  bytes: number;
  at: number;
}

export interface RunSummary {
  runId: string;
  version: number;
  status: RunStatus;
  step: number;
  agent: string;
  updatedAt: number;
  /** Why the run ended, when it did not complete. */
  reason?: string;
}

export interface ListRunsQuery {
  status?: RunStatus;
  /** Only runs whose latest checkpoint is older than this (ms since epoch): stalled-run sweeps. */
  updatedBefore?: number;
  limit?: number;
}

/**
 * Durable checkpoints, one version per write. The contract suite in test/contract runs against every
 * implementation.
 */
export interface CheckpointStore {
  /** Writes version 1 unless the run exists; says which. */
  create(state: RunState, meta: WriteMeta): Promise<{ created: boolean; version: number; bytes: number }>;
  /**
   * The latest checkpoint with the pending decision and the step records after `afterStep` (all of them
   * by default), or undefined. Step records never change once written, so a caller that holds the first
   * `afterStep` of them need not read them again.
   */
  load(runId: string, options?: { afterStep?: number }): Promise<StoredCheckpoint | undefined>;
  /**
   * Records the model's decision for a step before its side-effecting tool runs. Write-once per step:
   * fails with StaleVersionError if the run moved past expectedVersion or the step already has one.
   */
  recordDecision(runId: string, expectedVersion: number, decision: Decision): Promise<void>;
  commit(write: CheckpointWrite): Promise<CommitResult>;
  /** Marks a run whose latest checkpoint cannot be read as failed, keeping the unreadable data. */
  markUnreadable(runId: string, expectedVersion: number, reason: string, meta: WriteMeta): Promise<CommitResult>;
  /** The retained checkpoint timeline, oldest first. */
  history(runId: string): Promise<CheckpointInfo[]>;
  list(query?: ListRunsQuery): Promise<RunSummary[]>;
}

/** Large tool outputs, content-addressed. */
export interface BlobStore {
  put(ref: string, data: Buffer): Promise<void>;
  get(ref: string): Promise<Buffer | undefined>;
}

/** What a queue message asks: advance this run, from this version. */
export interface RunMessage {
  runId: string;
  version: number;
}

export interface Delivery {
  /** The raw body as received: it may be malformed. */
  body: string;
  receiveCount: number;
  /** Backend handle for ack/release. */
  receipt: string;
}

export interface RunQueue {
  /**
   * Deduplicated on (runId, version) within the queue's deduplication window (5 minutes on SQS; a day
   * locally): sending the same message twice in it enqueues it once. A copy sent later is delivered, finds
   * the run moved on, and stops.
   */
  send(message: RunMessage, options?: { delayMs?: number }): Promise<void>;
  /**
   * Sends a run's message again when the run may have none left: the earlier send of this version may
   * have been consumed without a successor, and its deduplication record would swallow a plain send.
   * The local queue makes it live again unless the run has a live message for this version or a later
   * one. SQS cannot tell: without a token it is a plain send (SQS forgets a deduplication id after 5
   * minutes); with one it gets past the earlier send, one copy per token within the window. Says whether
   * it sent (SQS: always).
   */
  redrive(message: RunMessage, token?: string): Promise<boolean>;
}

export interface ReceiveOptions {
  /** Wait up to this long for a message (long polling). */
  waitMs?: number;
  /** A received message is hidden from other workers this long, then delivered again unless acked. */
  visibilityMs?: number;
  max?: number;
}

/** The consuming side of a queue, for worker loops (a Lambda's event source does this on AWS). */
export interface RunQueueConsumer {
  receive(options?: ReceiveOptions): Promise<Delivery[]>;
  /** Deletes a delivered message; false if its receipt expired (another worker received it since). */
  ack(delivery: Delivery): Promise<boolean>;
  /** Makes a delivered message visible again after delayMs (a heartbeat extends with a longer delay). */
  release(delivery: Delivery, delayMs: number): Promise<void>;
  /**
   * Running runs whose latest checkpoint is older than `before` and that have no live message for their
   * latest version, oldest first: what a worker loop re-drives. Only a queue that can see the runs has it
   * (the local one, in the same file); on AWS the scheduled sweeper lists candidates from the table.
   */
  stalledRuns?(before: number, limit: number): Promise<RunSummary[]>;
}

/** Applies an effect at most once per idempotency key, remembering its result. */
export interface IdempotencyLedger {
  once<T>(key: string, args: unknown, effect: () => Promise<T>, options?: { leaseMs?: number }): Promise<T>;
}

export interface ToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the tool's input. */
  inputSchema: Record<string, unknown>;
}

export interface ModelSettings {
  model?: string;
  maxTokens?: number;
  temperature?: number;
}

export interface ModelRequest {
  runId: string;
  step: number;
  prompt: PromptBlock[];
  tools: ToolSpec[];
  settings: ModelSettings;
  signal?: AbortSignal;
}

/** `model` is the id of the model that answered, when the backend reports one (recorded per step for cost). */
export type ModelReply =
  | { kind: 'tool'; tool: string; input: unknown; usage?: Usage; model?: string }
  | { kind: 'done'; summary: string; usage?: Usage; model?: string }
  /** Neither one tool call nor DONE (several calls, no call, truncation, refusal): the reason says which. */
  | { kind: 'invalid'; reason: string; usage?: Usage; model?: string };

/** Throws TransientError or PermanentError (lib/core/errors.ts) for failures that are not a reply. */
export interface Model {
  readonly name: string;
  decide(request: ModelRequest): Promise<ModelReply>;
}

export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
