import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RunStatus } from '../core/state.ts';
import type { Clock, Delivery, QueueReceive, ReceiveOptions, RedriveOptions, RunMessage, RunQueue, RunQueueConsumer, RunSummary, SendOptions, TakenMessage } from '../ports.ts';
import { systemClock } from '../ports.ts';
import type Database from 'better-sqlite3';
import { immediate, isBusy, latestVersionOf, newestCheckpointOf, preparedOnce, refuseLayoutChangedUnder, type Db, type Prepare } from './database.ts';
import { refuseMovedFile } from './moved-file.ts';
import type { Logger } from '../log.ts';
import { CLOCK_STEP_TOLERANCE_MS, StepWatch, warnClockStep } from './clock-step.ts';

export const DEFAULT_VISIBILITY_MS = 30_000;
const POLL_MS = 50;
const TOMBSTONE_MS = 24 * 3600 * 1000;

/**
 * The run's message, not acked, that moves it: one for this version or a later one, or one a worker other
 * than the caller (`:held`, the receipt token the caller holds, or NULL) has received. Such a row may be
 * versions behind the run: a worker's hand-over leaves it as it is while the worker steps on (handOver),
 * and whoever receives it next gets it at the run's newest version (takeVisible). The caller's own row is
 * not live: it is about to ack it. A run has one row, keyed by its id in the dedup_key index; `+` keeps
 * SQLite from preferring the index of all live messages instead.
 */
const LIVE_MESSAGE = `SELECT 1 FROM queue q WHERE q.dedup_key = :run AND +q.acked_at IS NULL
  AND (q.version >= :version OR q.receipt IS NOT NULL AND q.receipt IS NOT :held)`;

/**
 * The newest version of a running run, for its queue row (`q`) being received; NULL for a row of a run
 * not running, or of no known run. A waiting run's row is left at its older version: a redelivery of it is
 * then stale, and the handler drives the wait, whose timer, sent for the waiting version, is newer than the
 * row and so not taken for a duplicate of it.
 */
const NEWEST_VERSION = `(SELECT ${latestVersionOf('r.run_no')} FROM runs r WHERE r.run_id = q.run_id AND r.status = 'running')`;

/** The run (its id the one parameter) has a cancel requested, not yet applied. */
const CANCEL_REQUESTED = 'EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND cancel_requested IS NOT NULL)';

/**
 * A run has one queue row, its message for its newest version sent: a send for a newer version rewrites
 * it in place (its receipt and receive count too), and one for this version or an older one is a
 * duplicate and changes nothing. A message of an older version is stale by the time a newer one is sent
 * (that version's checkpoint is written first), so nothing is lost; in place, a step's send writes the
 * row's page and the live index's, where a row per version also wrote the dedup_key index's.
 */
const ON_NEWER_VERSION = `ON CONFLICT (dedup_key) DO UPDATE SET agent = excluded.agent, version = excluded.version, body = excluded.body,
  visible_at = excluded.visible_at, receive_count = excluded.receive_count, receipt = excluded.receipt, acked_at = NULL, created_at = excluded.created_at
  WHERE excluded.version > queue.version`;

/** A message's row, visible at the time `visibleAt` gives (its SQL), the run's agent its tag. */
const sendAt = (visibleAt: string) => `INSERT INTO queue (dedup_key, run_id, agent, version, body, visible_at, receive_count, receipt, created_at)
  VALUES (?, ?, (SELECT agent FROM runs WHERE run_id = ?), ?, ?, ${visibleAt}, 0, NULL, ?) ${ON_NEWER_VERSION}`;
/** Written once, not at every step's send. */
const SEND = sendAt('?');
const SEND_DELAYED = sendAt(`CASE WHEN ${CANCEL_REQUESTED} THEN ? ELSE ? END`);

/**
 * Running runs with no checkpoint since :before and no live message for their latest version. A running
 * run's latest version is its newest checkpoint row (its steps do not write the runs row).
 */
const STALLED_RUNS = `SELECT r.run_id, c.version, r.status, c.step, r.agent, c.created_at AS updated_at FROM runs r
  JOIN checkpoints c ON c.id = ${newestCheckpointOf('r.run_no')}
  WHERE r.status = 'running' AND (c.created_at < :before OR c.created_at > :ahead)
    AND NOT EXISTS (${LIVE_MESSAGE.replaceAll(':run', 'r.run_id').replace(':version', 'c.version').replace(':held', 'NULL')})
  ORDER BY c.created_at LIMIT :limit`;

/**
 * An SQS-like queue in the SQLite file: a received message is hidden for the visibility timeout and
 * delivered again unless acked, with a receive count. Receiving is one UPDATE ... RETURNING, so two
 * worker processes can never take the same visible message.
 *
 * Several agents share one file: each message carries its run's agent, taken from the runs table when it
 * is sent (so whoever sends it, the tag is the run's), and a worker's consumer (forAgents) receives only
 * its agent's messages. Another agent's message stays for that agent's workers.
 */
export class SqliteQueue implements RunQueue, RunQueueConsumer {
  constructor(
    private readonly db: Db,
    private readonly options: { clock?: Clock; runId?: string; agents?: readonly string[]; log?: Logger; watch?: StepWatch } = {},
  ) {
    // One for the process's consumers (forRun, forAgents): each look is a read of every live row.
    this.options = { ...options, watch: options.watch ?? new StepWatch() };
  }

  private sql(text: string): Database.Statement {
    return preparedOnce(this.db)(text);
  }

  private get now(): number {
    return (this.options.clock ?? systemClock).now();
  }

  /** Timers need no group here (the local queue has none to hold back), only the re-timing below. */
  async send(message: RunMessage, options: SendOptions = {}): Promise<void> {
    const now = this.now;
    enqueue((text) => this.sql(text), message, options.delayMs ?? 0, now);
    // A wait's timer that came before its deadline (a clock stepped back: clock-step.ts counts the timer's
    // delay again from the new now, while the deadline stays a point on the clock) is sent again for the
    // version of the row in hand. That send was a duplicate of the row, which the caller then acked: the
    // waiting run had no message left and slept for good. The row is timed again instead, and let go of, so
    // the caller's ack of it finds nothing.
    if (options.timer) {
      this.sql('UPDATE queue SET visible_at = ?, created_at = ?, receipt = NULL, receive_count = 0 WHERE dedup_key = ? AND version = ? AND acked_at IS NULL AND receipt IS NOT NULL')
        .run(now + (options.delayMs ?? 0), now, message.runId, message.version);
    }
  }

  /**
   * Makes the run's message live again unless the run has a live message (LIVE_MESSAGE: for this version
   * or a later one, waiting, delayed or in flight, or in another worker's hands). The run's row, acked,
   * stays for a day as the deduplication record, which would swallow a plain send: it is brought back
   * instead, at this version, its receive count kept when it was this version's (so a redelivery still
   * counts as one). Checked and written in one transaction, so two workers re-driving at once make one
   * message. No token is needed; `held`, the caller's delivery, is one row the caller is about to ack.
   */
  async redrive(message: RunMessage, options: RedriveOptions = {}): Promise<boolean> {
    return immediate(this.db, () => {
      const held = options.held === undefined ? null : splitReceipt(options.held)[1];
      const now = this.now;
      // A run with a cancel requested whose message waits out a failed try's backoff, received by no
      // worker (no receipt: no step is in flight), has it now: a cancel waited up to 15 minutes for it.
      this.sql(`UPDATE queue SET visible_at = ?, created_at = ? WHERE dedup_key = ? AND acked_at IS NULL AND receipt IS NULL AND visible_at > ? AND version >= ? AND ${CANCEL_REQUESTED}`)
        .run(now, now, message.runId, now, message.version, message.runId);
      if (this.sql(`${LIVE_MESSAGE} LIMIT 1`).get({ run: message.runId, version: message.version, held })) return false;
      this.sql(
        `INSERT INTO queue (dedup_key, run_id, agent, version, body, visible_at, created_at) VALUES (?, ?, (SELECT agent FROM runs WHERE run_id = ?), ?, ?, ?, ?)
         ON CONFLICT (dedup_key) DO UPDATE SET agent = excluded.agent, acked_at = NULL, receipt = NULL, visible_at = excluded.visible_at,
           receive_count = CASE WHEN queue.version = excluded.version THEN queue.receive_count ELSE 0 END,
           version = excluded.version, body = excluded.body, created_at = excluded.created_at`,
      ).run(message.runId, message.runId, message.runId, message.version, JSON.stringify({ runId: message.runId, version: message.version }), now, now);
      return true;
    });
  }

  /**
   * Running runs with no checkpoint since `before` and no live message for their latest version, oldest
   * first. One query over the running runs (same file) and their newest checkpoint rows, each candidate
   * checked against its own row in the queue's dedup_key index.
   */
  async stalledRuns(before: number, limit: number): Promise<RunSummary[]> {
    // A newest checkpoint stamped ahead of now was written before a clock step back (clock-step.ts): by its
    // time alone, its run would count as stalled only once the clock caught up, the length of the step late.
    const ahead = this.now + CLOCK_STEP_TOLERANCE_MS;
    const rows = this.sql(STALLED_RUNS).all({ before, ahead, limit }) as { run_id: string; version: number; status: RunStatus; step: number; agent: string; updated_at: number }[];
    return rows.map((r) => ({ runId: r.run_id, version: r.version, status: r.status, step: r.step, agent: r.agent, updatedAt: r.updated_at }));
  }

  /** Puts a raw body on the queue, as another system might: for tests of malformed messages. */
  sendRaw(body: string): void {
    const now = this.now;
    this.sql('INSERT INTO queue (dedup_key, run_id, body, visible_at, created_at) VALUES (?, ?, ?, ?, ?)')
      .run(`raw/${randomUUID()}`, '', body, now, now);
  }

  /** RunQueue.takeIdle: this run's visible message, received as the foreground `stepwise run` would. */
  async takeIdle(runId: string, visibilityMs: number): Promise<TakenMessage | undefined> {
    const consumer = this.forRun(runId);
    const [delivery] = await consumer.receive({ visibilityMs });
    return delivery && { ack: () => consumer.ack(delivery), handBack: () => consumer.handBack(delivery) };
  }

  /** A consumer that only takes messages of one run (the foreground `stepwise run`). */
  forRun(runId: string): SqliteQueue {
    return new SqliteQueue(this.db, { ...this.options, runId });
  }

  /**
   * A consumer that only takes messages of runs of these agents (a worker's: its name and former names),
   * plus messages of no known run, which any worker may drop.
   */
  forAgents(agents: readonly string[]): SqliteQueue {
    if (!agents.length) throw new Error('forAgents needs at least one agent name');
    return new SqliteQueue(this.db, { ...this.options, agents });
  }

  /** Messages ready to be received, by agent, for agents other than these: work no worker here takes. */
  waitingForOthers(agents: readonly string[]): { agent: string; messages: number }[] {
    const marks = agents.map(() => '?').join(', ');
    return this.sql(
      `SELECT agent, count(*) AS messages FROM queue WHERE acked_at IS NULL AND visible_at <= ? AND agent IS NOT NULL AND agent NOT IN (${marks}) GROUP BY agent ORDER BY agent`,
    ).all(this.now, ...agents) as { agent: string; messages: number }[];
  }

  async receive(options: ReceiveOptions = {}): Promise<Delivery[]> {
    // A span of this process's life, on its monotonic clock: by Date.now(), a poll of a second lasted an
    // hour once the system's clock stepped back an hour, and the worker's sweeps waited behind it.
    const deadline = performance.now() + (options.waitMs ?? 0);
    for (;;) {
      const deliveries = this.takeUnlessLocked(options.max ?? 1, options.visibilityMs ?? DEFAULT_VISIBILITY_MS);
      // A stopped worker's wait ends at its next poll: it polled on for the whole waitMs (a minute's long
      // poll, a minute to stop an idle worker).
      if (deliveries.length || performance.now() >= deadline || options.signal?.aborted) return deliveries;
      await sleep(POLL_MS);
    }
  }

  /**
   * A take refused because another connection held the file's write lock past the busy timeout (an
   * operator's open transaction, a process frozen inside its commit) took nothing: it is an
   * empty poll, and the next one tries again. Thrown, it stopped an idle worker for good.
   */
  private takeUnlessLocked(max: number, visibilityMs: number): Delivery[] {
    try {
      return this.take(max, visibilityMs);
    } catch (error) {
      if (!isBusy(error)) throw error;
      return [];
    }
  }

  /** This consumer's receive, for a checkpoint commit on the same file to do in its transaction. */
  receiveInCommit(visibilityMs: number): QueueReceive {
    const { runId, agents } = this.options;
    return { ...(runId ? { runId } : {}), ...(agents ? { agents } : {}), max: 1, visibilityMs };
  }

  /**
   * Undoes a receive whose delivery was never started (a worker stopping with its next message): visible
   * now with the receive uncounted, so its step counts no restart. Only the receipt's holder can. A
   * delivery a hand-over gave (handOver) is for a newer version than its row says: the row becomes that
   * version's message, never received.
   */
  async handBack(delivery: Delivery): Promise<boolean> {
    const [id, receipt] = splitReceipt(delivery.receipt);
    const version = versionOf(delivery.body);
    return this.sql(
      `UPDATE queue SET visible_at = :now, created_at = :now, receipt = NULL,
         receive_count = CASE WHEN version < :version THEN 0 ELSE max(receive_count - 1, 0) END,
         body = CASE WHEN version < :version THEN :body ELSE body END, version = max(version, :version)
       WHERE id = :id AND receipt = :receipt AND acked_at IS NULL`,
    ).run({ now: this.now, version, body: delivery.body, id, receipt }).changes > 0;
  }

  async ack(delivery: Delivery): Promise<boolean> {
    return ackReceipt((text) => this.sql(text), delivery.receipt, this.now);
  }

  async release(delivery: Delivery, delayMs: number): Promise<void> {
    const [id, receipt] = splitReceipt(delivery.receipt);
    const now = this.now;
    this.sql('UPDATE queue SET visible_at = ?, created_at = ? WHERE id = ? AND receipt = ? AND acked_at IS NULL').run(now + delayMs, now, id, receipt);
  }

  /** Messages not yet acked (waiting or in flight). */
  depth(): number {
    return (this.sql('SELECT count(*) AS n FROM queue WHERE acked_at IS NULL').get() as { n: number }).n;
  }

  /** Drops tombstones of acked messages older than a day. */
  prune(): number {
    return this.sql('DELETE FROM queue WHERE acked_at IS NOT NULL AND acked_at < ?').run(this.now - TOMBSTONE_MS).changes;
  }

  /**
   * Live messages whose times were written before the clock stepped back (clock-step.ts): a queued one was
   * hidden for the step, a dead worker's in-flight one for the step plus its visibility. Each is hidden
   * from now for what was left of its delay or visibility when written (visible_at - created_at, as every
   * write of visible_at writes created_at with it), never longer than it was, so a live holder keeps its
   * message, and its heartbeat writes it on the new clock. Any worker that looks mends them for all.
   */
  private rebaseStepped(): void {
    const FOUND = 'SELECT count(*) AS n, max(created_at) AS newest FROM queue WHERE acked_at IS NULL AND created_at > ?';
    if (!(this.sql(FOUND).get(this.now + CLOCK_STEP_TOLERANCE_MS) as { n: number }).n) return;
    // `now` read under the write lock: read before waiting for it (up to the busy timeout), rows other
    // workers wrote meanwhile on the new clock would count as written before the step, and be shortened.
    const { mended, stepMs } = immediate(this.db, () => {
      const now = this.now;
      const since = now + CLOCK_STEP_TOLERANCE_MS;
      const found = this.sql(FOUND).get(since) as { n: number; newest: number | null };
      if (!found.n) return { mended: 0, stepMs: 0 };
      const changes = this.sql(
        'UPDATE queue SET visible_at = min(visible_at, ? + max(visible_at - created_at, 0)), created_at = ? WHERE acked_at IS NULL AND created_at > ?',
      ).run(now, now, since).changes;
      return { mended: changes, stepMs: found.newest! - now };
    });
    if (mended) warnClockStep(this.options.log, stepMs, `${mended} queued message${mended === 1 ? '' : 's'}' delays and visibility timeouts`);
  }

  private take(max: number, visibilityMs: number): Delivery[] {
    // A worker whose file was deleted or replaced stops at a receive (the look is at most every
    // MOVED_FILE_CHECK_MS), where it would take its messages from the file no other process reads.
    refuseMovedFile(this.db);
    const now = this.now;
    if (this.options.watch!.due(now)) {
      this.rebaseStepped();
      this.options.watch!.looked(now);
    }
    // An idle worker polls often: look first with a read, so polling an empty queue never takes the
    // write lock that other workers' checkpoints need.
    if (!anyVisible((text) => this.sql(text), filterOf(this.options), now)) return [];
    // Nor from a file a newer release has brought forward: its step would ask its model, then be refused.
    refuseLayoutChangedUnder(this.db);
    return takeVisible((text) => this.sql(text), { ...this.options, max, visibilityMs }, now);
  }
}

/**
 * The queue's send and ack, on whichever connection to the file runs them: the queue's own, or a
 * checkpoint commit's, which folds them into its transaction (CheckpointWrite.queue).
 */
export function enqueue(sql: Prepare, message: RunMessage, delayMs: number, now: number): void {
  const body = JSON.stringify(message);
  // A delay (a failed try's backoff, up to a retry-after of 15 minutes) is dropped for a run with a cancel
  // requested: its next delivery only applies the cancel, which waited out the backoff meanwhile.
  if (delayMs > 0) sql(SEND_DELAYED).run(message.runId, message.runId, message.runId, message.version, body, message.runId, now, now + delayMs, now);
  else sql(SEND).run(message.runId, message.runId, message.runId, message.version, body, now + delayMs, now);
}

/**
 * A step's send followed by its receive, done as one when they amount to one: the message just sent is
 * what the receive would take when it is visible at once, the receive takes one message, its filter admits
 * it, and nothing older is visible to that filter. It is then written received (one write of the run's
 * row, where a send and a receive are two), with what the receive would have set: hidden for the
 * visibility, received once, the receipt's token. Returns undefined when they do not amount to one, or the
 * send was a duplicate: the caller then sends and receives as two.
 */
export function enqueueReceived(sql: Prepare, send: { message: RunMessage; delayMs?: number }, receive: QueueReceive, now: number): Delivery[] | undefined {
  if ((send.delayMs ?? 0) !== 0 || (receive.max ?? 1) !== 1) return undefined;
  const filter = filterOf(receive);
  if (anyVisible(sql, filter, now)) return undefined;
  const { message } = send;
  const token = randomUUID();
  const body = JSON.stringify(message);
  // From the runs row, as a send tags its message; no row is written unless the filter admits the run.
  const written = sql(
    `INSERT INTO queue (dedup_key, run_id, agent, version, body, visible_at, receive_count, receipt, created_at)
     SELECT run_id, run_id, agent, ?, ?, ?, 1, ?, ? FROM runs WHERE run_id = ? ${filter.only} ${ON_NEWER_VERSION}`,
  ).run(message.version, body, now + receive.visibilityMs, token, now, message.runId, ...filter.args);
  if (!written.changes) return undefined;
  // The row's id from the dedup_key index alone: RETURNING cost a step 8-12 us more (measured).
  const { id } = sql('SELECT id FROM queue WHERE dedup_key = ?').get(message.runId) as { id: number };
  return [{ body, receiveCount: 1, receipt: `${id}:${token}`, message }];
}

/**
 * What a hand-over read (handOver) found, for the next one: the row held, when its lease ends, and when the
 * consumer's filter next has another message visible. It stays true while nothing is written to the file,
 * which the checkpoint store's write marks tell: a worker stepping one run alone then hands over without
 * a read.
 */
export interface HeldRow {
  receipt: string;
  runId: string;
  /** The receive it was read for: the same object, so the same filter. */
  receive: QueueReceive;
  /** The row's visible_at: its lease. */
  leaseUntil: number;
  /**
   * When another message of the filter is visible: the earliest visible_at of the live messages up to a
   * third of the visibility ahead, else that horizon (nothing further was read).
   */
  othersVisibleAt: number;
}

/**
 * A step's ack, send and receive, done as one when the delivery it acks is the run's own row, still held
 * by that receipt with at least two thirds of the visibility left, and the receive would take the message
 * just sent (as for enqueueReceived). The worker keeps the row, and its receipt, for the next version: the
 * row is only read, so a busy worker's step writes no queue page at all (one WAL page fewer a step, about
 * 5% of a durable step, bench/step-overhead.ts). The row is left at the version it was received for, so
 * it can be many versions behind the run while its holder steps on. Nothing reads that as the run's
 * version: whoever receives the row next gets it at the run's newest version, counted as a redelivery
 * (takeVisible); a redrive or the sweep takes a row in another worker's hands for a live message
 * (LIVE_MESSAGE); a send for a newer version still rewrites it. The lease so kept is renewed by the
 * worker's heartbeat within a third of the visibility of a step's start (runWorker), and by the first
 * hand-over after a third of it has gone, which falls back to enqueueReceived. Undefined when it does not apply.
 *
 * `known`: what the last hand-over of this row read, which the caller vouches nothing was written since.
 * While it says the row is kept and nothing else is visible, that is the answer, with no read; else the
 * read gives it.
 */
export function handOver(
  sql: Prepare, ack: string, send: { message: RunMessage; delayMs?: number }, receive: QueueReceive, now: number, known?: HeldRow,
): { received: Delivery[]; held: HeldRow } | undefined {
  if ((send.delayMs ?? 0) !== 0 || (receive.max ?? 1) !== 1) return undefined;
  const { message } = send;
  const keepUntil = now + Math.ceil((receive.visibilityMs * 2) / 3);
  // What the last read found answers only while it still says yes: past its horizon (it read nothing
  // beyond), or once the lease is short, the read decides.
  let held = known?.receipt === ack && known.runId === message.runId && known.receive === receive
    && now < known.othersVisibleAt && known.leaseUntil >= keepUntil ? known : undefined;
  if (!held) {
    const filter = filterOf(receive);
    const [id, token] = splitReceipt(ack);
    const horizon = now + Math.ceil(receive.visibilityMs / 3);
    // Nothing older visible to the filter (else the receive takes that), and the row still held: one read.
    const { next, lease } = sql(filter.handOver).get(
      horizon, id, ...filter.args, horizon, id, token, message.runId, message.version, ...filter.args,
    ) as { next: number; lease: number | null };
    if (lease === null) return undefined;
    held = { receipt: ack, runId: message.runId, receive, leaseUntil: lease, othersVisibleAt: next };
  }
  if (held.othersVisibleAt <= now || held.leaseUntil < keepUntil) return undefined;
  return { received: [{ body: JSON.stringify(message), receiveCount: 1, receipt: ack, message }], held };
}

/**
 * The queue's receive: the oldest visible messages of the consumer's filter (FIFO by visible_at, then by
 * run: a run's row keeps its id, so messages visible in the same millisecond go in the order runs began),
 * hidden for the visibility, their receive counted. One UPDATE ... RETURNING, so two connections never
 * take the same message: run by SqliteQueue.receive, or inside a checkpoint commit (QueueWork.receive).
 *
 * A row behind its running run's newest version is brought up to it. A worker that had received it
 * stepped the run on by hand-overs (handOver) and then let it go, or stopped answering: its try of the
 * newest version is the first, so this receive is the second, as when a hand-over wrote each version. A row
 * sent and never received before the run moved on (by another writer) is that version's first receive.
 */
export function takeVisible(sql: Prepare, receive: QueueReceive, now: number): Delivery[] {
  const token = randomUUID();
  const filter = filterOf(receive);
  const max = receive.max ?? 1;
  if (!Number.isInteger(max) || max < 1) throw new RangeError(`receive: max must be a whole number of at least 1, not ${max}`);
  // The limit is written into the statement (one prepared statement per limit), not bound: with a bound
  // LIMIT, SQLite took 15 us to find the first live message where a literal one takes 1-4 us, every step.
  // The rows and each one's newest version are found once (t); every SET expression reads the row as it was.
  const rows = sql(
    `UPDATE queue SET visible_at = ?, created_at = ?, receipt = ?,
       receive_count = CASE WHEN t.newest > queue.version THEN CASE WHEN queue.receipt IS NULL THEN 1 ELSE 2 END ELSE queue.receive_count + 1 END,
       body = CASE WHEN t.newest > queue.version AND json_valid(queue.body) THEN json_set(queue.body, '$.version', t.newest) ELSE queue.body END,
       version = max(queue.version, coalesce(t.newest, queue.version))
     FROM (SELECT q.id, ${NEWEST_VERSION} AS newest FROM queue q WHERE acked_at IS NULL AND visible_at <= ? ${filter.only} ORDER BY visible_at, id LIMIT ${max}) AS t
     WHERE queue.id = t.id
     RETURNING queue.id, queue.body, queue.receive_count, queue.receipt`,
  ).all(now + receive.visibilityMs, now, token, now, ...filter.args) as { id: number; body: string; receive_count: number; receipt: string }[];
  return rows.map((r) => ({ body: r.body, receiveCount: r.receive_count, receipt: `${r.id}:${r.receipt}` }));
}

/** Whether the consumer's filter has a message visible now (a read: it takes no lock). */
function anyVisible(sql: Prepare, { visible, args }: Filter, now: number): boolean {
  return sql(visible).get(now, ...args) !== undefined;
}

/** The SQL of a consumer's filter: one run's messages, or its agents' and those of no known run. */
interface Filter {
  /** The condition, to follow others with AND, and its arguments. */
  only: string;
  args: unknown[];
  /** anyVisible's statement. */
  visible: string;
  /**
   * handOver's, both of its reads in one: when another message of the filter is next visible (up to a
   * horizon, else the horizon), and the held row's lease (NULL: no longer held as it was).
   */
  handOver: string;
}

const filters = new WeakMap<object, Filter>();

/**
 * A consumer's filter, built once per filter object: a worker's lives as long as the worker, so its
 * statements' texts are the same strings at every step, found in the statement cache without being built
 * and hashed again.
 */
function filterOf(filter: { runId?: string; agents?: readonly string[] }): Filter {
  let built = filters.get(filter);
  if (!built) {
    const { runId, agents } = filter;
    const only = `${runId ? 'AND run_id = ?' : ''} ${agents ? `AND (agent IS NULL OR agent IN (${agents.map(() => '?').join(', ')}))` : ''}`;
    const visible = `SELECT 1 FROM queue WHERE acked_at IS NULL AND visible_at <= ? ${only} LIMIT 1`;
    built = {
      only, args: [...(runId ? [runId] : []), ...(agents ?? [])], visible,
      handOver: `SELECT coalesce((SELECT min(visible_at) FROM queue WHERE acked_at IS NULL AND visible_at <= ? AND id <> ? ${only}), ?) AS next,
        (SELECT visible_at FROM queue WHERE id = ? AND receipt = ? AND acked_at IS NULL AND dedup_key = ? AND version < ? ${only}) AS lease`,
    };
    filters.set(filter, built);
  }
  return built;
}

/** False if the receipt expired: another worker received the message since. */
export function ackReceipt(sql: Prepare, receipt: string, now: number): boolean {
  const [id, token] = splitReceipt(receipt);
  return sql('UPDATE queue SET acked_at = ? WHERE id = ? AND receipt = ? AND acked_at IS NULL').run(now, id, token).changes > 0;
}

/** The version a message body names; 0 for a body that names none (it never moves a row back). */
function versionOf(body: string): number {
  try {
    const { version } = JSON.parse(body) as { version?: unknown };
    return typeof version === 'number' && Number.isInteger(version) ? version : 0;
  } catch {
    return 0;
  }
}

function splitReceipt(receipt: string): [number, string] {
  const at = receipt.indexOf(':');
  return [Number(receipt.slice(0, at)), receipt.slice(at + 1)];
}
