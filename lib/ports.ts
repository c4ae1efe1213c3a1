/**
 * The few interfaces the engine needs. Each backend (lib/local, lib/aws) implements them; nothing in
 * lib/core or lib/engine knows which backend it runs on.
 */
import type { StoredCheckpoint } from './core/codec.ts';
import type { PromptBlock } from './core/prompt.ts';
import type { CondensedBlock, Decision, RunState, RunStatus, StepRecord, Usage } from './core/state.ts';
import type { RunPosition } from './core/run-order.ts';
import { machineTime, type MachineTime } from './machine-time.ts';

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
  /**
   * Summaries of condensed blocks this checkpoint writes (lib/core/condensed.ts), with it or not at all.
   * A block's summary is the same whoever computes it, so writing one that is stored already is harmless.
   */
  summaries?: CondensedBlock[];
  /**
   * Queue work done by this write's own transaction, so the step, its next message and the ack of its
   * delivery are one durable write: given only to a store with `carriesQueueWork`.
   */
  queue?: QueueWork;
  /**
   * Large outputs the appended record refers to by ref, written by this write's own transaction, so a
   * step's blob and its checkpoint are one write: given only to a store with `carriesBlobs`.
   */
  blobs?: readonly { ref: string; data: Buffer }[];
}

/** The queue operations of one step, for a store whose database also holds the run queue. */
export interface QueueWork {
  /** The next step's message, deduplicated on (runId, version) as RunQueue.send is. */
  send?: { message: RunMessage; delayMs?: number };
  /** The receipt of the delivery being handled: acked unless it expired (another worker received it since). */
  ack?: string;
  /**
   * The worker's next message, received as its consumer would (RunQueueConsumer.receiveInCommit): after
   * the send, so the message just sent is taken only if nothing older is visible. CommitResult.received.
   */
  receive?: QueueReceive;
}

/** A receive for one consumer: its filter, how many messages, how long they stay hidden. */
export interface QueueReceive {
  /** Only this run's messages (the foreground `stepwise run`). */
  runId?: string;
  /** Only these agents' runs' messages, and those of no known run (a worker's). */
  agents?: readonly string[];
  /** At most this many (default 1). */
  max?: number;
  visibilityMs: number;
}

export interface CommitResult {
  version: number;
  /** Bytes written by this checkpoint (head, the appended step and any summaries). */
  bytes: number;
  /**
   * The head as written. A version is written once, so a load that returns this text returns this head:
   * the writer, holding it decoded, need not decode it again (HeldSteps.head).
   */
  head?: string;
  /** What `write.queue.receive` received, as RunQueueConsumer.receive returns it. */
  received?: Delivery[];
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

/** A page of a run's timeline, read newest first: versions below `before` (all when absent), at most `limit`. */
export interface HistoryPage {
  before?: number;
  limit?: number;
}

/** Steps `after` + 1 to `through` of a run. */
export interface StepRange {
  after: number;
  through: number;
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

/** Where a page of due waits ended (its last wait's deadline and run id). */
export interface WaitPosition {
  deadline: number;
  runId: string;
}

/** A waiting run's open wait, as the store indexes it. */
export interface OpenWait {
  runId: string;
  agent: string;
  waitId: string;
  version: number;
  deadline: number;
}

/**
 * Every store lists runs in one order: the latest update first, runs updated in the same millisecond by run
 * id, descending (lib/core/run-order.ts). `after` is the last run of the page before: the next page starts
 * after it, so paging through a list misses no run and repeats none, however many share a millisecond.
 */
export interface ListRunsQuery {
  status?: RunStatus;
  /** Only runs whose latest checkpoint is older than this (ms since epoch): stalled-run sweeps. */
  updatedBefore?: number;
  /**
   * Only runs whose latest checkpoint is stamped later than this: a stall sweep's runs whose worker's clock
   * ran ahead of the sweeper's, which `updatedBefore` would find only once the sweeper's clock caught up.
   */
  updatedAfter?: number;
  after?: RunPosition;
  limit?: number;
}


/**
 * Durable checkpoints, one version per write. The contract suite in test/contract runs against every
 * implementation.
 */
export interface CheckpointStore {
  /**
   * The run queue lives in this store's database (the local runtime): commit() does `write.queue` in the
   * checkpoint's transaction. A store without it (DynamoDB, with SQS beside it) is never given queue work.
   */
  readonly carriesQueueWork?: boolean;
  /**
   * The blob store lives in this store's database (the local runtime): commit() writes `write.blobs` in
   * the checkpoint's transaction. A store without it (DynamoDB, with S3 beside it) is never given blobs.
   */
  readonly carriesBlobs?: boolean;
  /**
   * Writes version 1 unless the run exists; says which. A state that already has step records (a fork
   * starts with its parent's first steps) gets them written as this run's own, before its head is visible.
   * `meta.queue`: the first step's send, done by the create's transaction when it creates the run (given
   * only to a store with `carriesQueueWork`).
   */
  create(state: RunState, meta: WriteMeta & Pick<CheckpointWrite, 'queue'>): Promise<{ created: boolean; version: number; bytes: number }>;
  /**
   * The latest checkpoint with the pending decision and the step records after `afterStep` (all of them
   * by default), or undefined. Step records never change once written, so a caller that holds the first
   * `afterStep` of them need not read them again. `recent`: the bounded read of a resume, the stored
   * summaries of the blocks condensed at the latest checkpoint's step (as `summaries`) and only the
   * records after the last of them (or after `afterStep`, if later): at most CONDENSE_AFTER records once
   * a run's blocks are summarised, however long it is.
   */
  load(runId: string, options?: { afterStep?: number; recent?: boolean }): Promise<StoredCheckpoint | undefined>;
  /**
   * Records the model's decision for a step before its side-effecting tool runs. Write-once per step:
   * fails with StaleVersionError if the run moved past expectedVersion or the step already has one.
   */
  recordDecision(runId: string, expectedVersion: number, decision: Decision): Promise<void>;
  commit(write: CheckpointWrite): Promise<CommitResult>;
  /**
   * Adds `delta` to the run's restart count and returns the new count: how many redeliveries started the
   * next step at this version (less the deliveries that started it and then paused, which add -1). Only
   * a redelivery writes it, so the first delivery of a step, the common path, writes nothing. Fenced on
   * the version (StaleVersionError), but it writes no checkpoint and leaves the version as it is; the next
   * commit resets the count to 0. load() returns it.
   */
  addRestarts(runId: string, expectedVersion: number, delta: number): Promise<number>;
  /**
   * Asks a running run to stop at its next step boundary: `request` (who, when, why) is kept on the run and
   * load() returns it as `cancelRequested`. Like addRestarts it writes no checkpoint and leaves the version
   * as it is, so a step already running still commits; the commits after it keep the request. Fenced on the
   * run still running, at `expectedVersion` or any later version (StaleVersionError once it waits or has
   * ended, or for no such run), not on that version alone: a request stands for whatever step runs now, and
   * one fenced on the version it read lost every try to a run stepping faster than the read. Returns the
   * version it was written beside.
   */
  requestCancel(runId: string, expectedVersion: number, request: string): Promise<number>;
  /**
   * Marks a run whose latest checkpoint cannot be read as failed, keeping the unreadable data. Returns the
   * step the store's own columns hold for it (the head cannot say), for the failure's log line.
   */
  markUnreadable(runId: string, expectedVersion: number, reason: string, meta: WriteMeta): Promise<CommitResult & { step: number }>;
  /**
   * The retained checkpoint timeline, oldest first: all of it, or with `page` the newest `limit`
   * checkpoints below version `before`, so a run of thousands of steps is read a page at a time.
   */
  history(runId: string, page?: HistoryPage): Promise<CheckpointInfo[]>;
  /**
   * The stored records of the steps in `range`, in step order, as load() gives them (text): none for no
   * such run or a range past its last step. Step records never change once written, so a reader of part
   * of a long run (one step and those before it, a page of the timeline) reads those alone, not all of them.
   */
  records(runId: string, range: StepRange): Promise<string[]>;
  /** Runs waiting now for an event of this type and correlation key (from the wait in their head). */
  waitingFor(type: string, key: string): Promise<OpenWait[]>;
  /**
   * Waiting runs whose deadline is at or before `before`, soonest first and waits due in the same
   * millisecond by run id: their timers are due. With `agents`, only their runs, up to `limit` of them
   * however many of other agents' come first. `after` is the last wait of the page before: the next page
   * starts after it, so the sweep reaches every due wait however many share a deadline (a fan-out of
   * runs sleeping until one instant), not the same first page on every sweep.
   */
  dueWaits(before: number, limit?: number, agents?: readonly string[], after?: WaitPosition): Promise<OpenWait[]>;
  list(query?: ListRunsQuery): Promise<RunSummary[]>;
  /**
   * Deletes a run that has ended and everything kept for it: its head, checkpoint versions, step records,
   * recorded decision, block summaries, its queue row (a store with `carriesQueueWork`), what its waits
   * left (a store's index of runs waiting for an event), and its idempotency records (every ledger key under
   * idempotencyKeyPrefix: its steps' and its approval emails'). Blobs are content-addressed and
   * may be another run's too: they are left for the blob sweep (`prune`), to which the deleted records no
   * longer refer. Fenced on the run being at `expectedVersion` in a terminal status (StaleVersionError
   * otherwise, nothing deleted): a retry that made it running again first wins, and one after it finds no run.
   *
   * The store deletes the idempotency records, not the ledger: they are in its database (the same SQLite
   * file, the same DynamoDB table), and they must be gone before the run id can be created again, or the new
   * run would find the old run's results under its own keys and skip its effects. SQLite does all of it in
   * one transaction; DynamoDB marks the head deleted (fenced), removes the rest, then the head, so the id
   * stays taken until all of it is gone (and, within SQS's deduplication window of the run's last step, a
   * bare mark holds it until then: FREE_AT_ATTRIBUTE in lib/aws/table-layout.ts).
   *
   * Without `expectedVersion` it only finishes a delete interrupted after its fence (a DynamoDB head
   * marked deleted, the process killed before the rest went), which load() no longer returns. Says
   * whether it deleted anything.
   */
  deleteRun(runId: string, expectedVersion?: number): Promise<boolean>;
}

/** Large tool outputs, content-addressed. */
export interface BlobStore {
  /**
   * `what` names the value in a refusal's reason (default: the step's output): a refused tool input, run
   * head or event payload was said to be the step's output.
   */
  put(ref: string, data: Buffer, what?: string): Promise<void>;
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
  /**
   * The body as the message this code sent, when the queue made the delivery from that message itself (a
   * step's commit receiving the next step's message): the handler takes it instead of parsing the body.
   */
  message?: RunMessage;
}

export interface SendOptions {
  delayMs?: number;
  /**
   * A wait's timer: delivered on its own, never ahead of or behind the run's step messages (on SQS FIFO a
   * delayed message in the run's group would hold every later message of the run back until it is due).
   */
  timer?: boolean;
}

export interface RunQueue {
  /**
   * Deduplicated on (runId, version) within the queue's deduplication window (5 minutes on SQS; a day
   * locally): sending the same message twice in it enqueues it once. A copy sent later is delivered, finds
   * the run moved on, and stops.
   */
  send(message: RunMessage, options?: SendOptions): Promise<void>;
  /**
   * Sends a run's message again when the run may have none left: the earlier send of this version may
   * have been consumed without a successor, and its deduplication record would swallow a plain send.
   * The local queue makes it live again unless the run has a live message for this version or a later
   * one. SQS cannot tell: without a token it is a plain send (SQS forgets a deduplication id after 5
   * minutes); with one it gets past the earlier send, one copy per token within the window. Says whether
   * it sent (SQS: always).
   */
  redrive(message: RunMessage, options?: RedriveOptions): Promise<boolean>;
  /**
   * Takes this run's message as a worker's receive would, if one is visible now, so no worker holds it:
   * what lets a cancel apply at once to a run nothing is working (cancelRun). Only a queue that receives by
   * run has it (the local one); on SQS a worker function is always there to apply the request. The taker
   * acks it once the run is cancelled, or hands it back.
   */
  takeIdle?(runId: string, visibilityMs: number): Promise<TakenMessage | undefined>;
}

/** A message RunQueue.takeIdle took: acked once the run moved on without it, or visible again at once. */
export interface TakenMessage {
  ack(): Promise<boolean>;
  handBack(): Promise<boolean>;
}

export interface RedriveOptions {
  /** SQS: gets past the deduplication of the earlier send, one copy per token within the window. */
  token?: string;
  /**
   * The receipt of the delivery the caller holds and is about to ack: the local queue does not count that
   * row as the run's live message (another worker's row it does, whatever version it was received for).
   */
  held?: string;
}

export interface ReceiveOptions {
  /** Wait up to this long for a message (long polling). */
  waitMs?: number;
  /** Stop waiting when this aborts (the worker stopping): nothing is received after it. */
  signal?: AbortSignal;
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
  /**
   * This consumer's receive, for a step's checkpoint to do in its own transaction (QueueWork.receive):
   * only a queue in the checkpoints' database has it (the local one). A consumer with it has handBack.
   */
  receiveInCommit?(visibilityMs: number): QueueReceive;
  /**
   * Gives back a delivery this worker received and never started: visible at once, its receive not
   * counted (so its step counts no restart). False if the receipt expired or the message was acked.
   */
  handBack?(delivery: Delivery): Promise<boolean>;
}

export interface OnceOptions {
  /**
   * How long a claim on the key lasts unless renewed (default 60 s; 1 s to 1 h). The holder renews it
   * every third of that while the effect runs, so this is how long a worker that died inside the effect
   * blocks the key, and how long a pause (a frozen process) it survives.
   */
  leaseMs?: number;
  /**
   * Renewing stops when this aborts, and the effect's own signal aborts with its reason; the claim is not
   * released (the effect may still be running), so it ends with its lease. `ctx.once` adds its try's time
   * to a signal given here: either one stops it.
   */
  signal?: AbortSignal;
  /**
   * Called when the effect finished after its claim was lost: the holder paused past its lease and another
   * attempt took the key, which may have applied the effect too (unless the effect checks the key itself).
   * The result is still kept, so no third attempt runs it; this is for the operator to hear of it.
   */
  onClaimLost?: () => void;
}

/**
 * Applies an effect at most once per idempotency key while its holder lives, remembering its result.
 * A claim has an owner: only the owner renews, releases (when the effect fails) or completes it. A live
 * claim of another attempt is IdempotencyInProgressError; a reused key with other arguments is
 * IdempotencyKeyReuseError. The effect's signal aborts if the claim was lost (the holder froze past its
 * lease and another attempt took the key); a holder that lost its claim never undoes the new owner's.
 */
export interface IdempotencyLedger {
  once<T>(key: string, args: unknown, effect: (signal: AbortSignal) => T | Promise<T>, options?: OnceOptions): Promise<T>;
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

/**
 * Throws for failures that are not a reply (lib/core/errors.ts): ModelUnavailableError when the API cannot
 * be reached or is overloaded (a step waits out such an outage, to 30 tries), PermanentError when retrying
 * cannot help, TransientError otherwise, ModelKeyError when the key is refused.
 */
export interface Model {
  readonly name: string;
  decide(request: ModelRequest): Promise<ModelReply>;
}

export interface Clock {
  now(): number;
  /**
   * The machine's monotonic time (machine-time.ts), shared by its processes: what the SQLite ledger times
   * leases by, so that a step of the wall clock cannot end a live holder's. Undefined (or absent) leaves
   * them on now().
   */
  machineTime?(): MachineTime | undefined;
  /** Calls `fn` every `ms` until the returned function is called; a test clock fires it as its time passes. */
  every?(ms: number, fn: () => unknown): () => void;
  /**
   * This process's monotonic time in ms (performance.now()): how long it has itself waited, which no step of
   * now() changes. The DynamoDB ledger times how long it watched another worker's claim on it, since
   * machines share no clock. Absent: now().
   */
  monotonic?(): number;
  /**
   * Resolves once `ms` of this process's time has passed, or at once when `signal` aborts (the caller
   * looks). Unlike `every`, it keeps the process alive meanwhile: a Lambda whose only work is this wait
   * must not end with it. A test clock resolves it as its time passes.
   */
  sleep?(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = { now: () => Date.now(), machineTime, monotonic: () => performance.now(), sleep: sleepOnTimers };

/** This process's monotonic time on `clock` (Clock.monotonic), or its now() where it has none. */
export function monotonicOn(clock: Clock): number {
  return clock.monotonic ? clock.monotonic() : clock.now();
}

/** Clock.sleep on `clock`: its own if it has one, else Node's timers. */
export function sleepOn(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return (clock.sleep ?? sleepOnTimers)(ms, signal);
}

function sleepOnTimers(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** A repeating timer on `clock`: its own if it has one, else setInterval (which never keeps a process alive). */
export function everyOn(clock: Clock, ms: number, fn: () => unknown): () => void {
  if (clock.every) return clock.every(ms, fn);
  const timer = setInterval(fn, ms);
  timer.unref();
  return () => clearInterval(timer);
}

/** An email to a person (an approval request). `id` names it: sending the same id twice sends it once. */
export interface Notification {
  id: string;
  to: string;
  subject: string;
  text: string;
  html: string;
}

/** Sends notifications: SES on AWS, an outbox folder of .eml files locally. */
export interface Notifier {
  send(notification: Notification): Promise<void>;
  /**
   * Deletes the notifications it keeps of a run (an outbox's files: those whose id is under the run's
   * idempotencyKeyPrefix), for a deleted run; says how many. A sender that keeps none has no such method:
   * mail SES sent cannot be taken back.
   */
  deleteRun?(runId: string): Promise<number>;
}

/** An event from outside (EventBridge, `stepwise emit`, the API) that may resume a run waiting for it. */
export interface RunEvent {
  /** Unique per event: a redelivered event is recognised by it. */
  id: string;
  type: string;
  key: string;
  payload: unknown;
  receivedAt: number;
  /**
   * Set by `EventBuffer.find` for a kept event whose payload it cannot give back (its S3 object gone or
   * damaged): why. Such an event answers no wait; its payload is null.
   */
  unreadable?: string;
}

/**
 * Events kept for a window after they arrive, so an event that comes before its wait begins is matched
 * when the wait begins (the race users of peer systems hit).
 */
export interface EventBuffer {
  /** Keeps the event; false if an event with this id is already kept (a redelivery). */
  put(event: RunEvent): Promise<boolean>;
  /** Kept events of this type and key received at or after `since`, oldest first; one it cannot read marked `unreadable`. */
  find(type: string, key: string, since: number): Promise<RunEvent[]>;
}
