import { DEFAULT_DEADLINE_MS, DEFAULT_MAX_RECEIVES, DEFAULT_RESERVE_MS, DEFAULT_TIMER_LOOKAHEAD_MS } from '../lib/settings.ts';
import { PK, SK, STATUS_INDEX, STATUS_KEY, STATUS_SORT, TTL_ATTRIBUTE, WAIT_DEADLINE, WAIT_INDEX, WAIT_SHARD } from '../lib/aws/table-layout.ts';

/**
 * The runtime's safety settings as checks on what a deployment will really get. Each rule says why it
 * exists: a user's override that breaks one fails the synth with that reason instead of a run that loops,
 * stalls or loses its history in production.
 */

/** What the construct reads back from the synthesized resources (undefined: not known, or a token). */
export interface DeploymentFacts {
  queueFifo: boolean | undefined;
  visibilityTimeoutSeconds: number | undefined;
  /** The dead-letter queue's receive count; undefined when the queue has no dead-letter queue. */
  maxReceiveCount: number | undefined;
  /** Whether the dead-letter queue is FIFO; undefined when there is none, or it is not known. */
  deadLetterQueueFifo?: boolean | undefined;
  workerTimeoutSeconds: number | undefined;
  /** The worker's memory in MB; undefined when not known at synth. */
  workerMemoryMb?: number | undefined;
  /** The worker's reserved concurrency; undefined when it has none. */
  reservedConcurrency?: number | undefined;
  /** The event source's maximum concurrency; undefined when it has none. */
  maxConcurrency?: number | undefined;
  functionResponseTypes: readonly string[] | undefined;
  batchSize: number | undefined;
  /** Undefined for a table this app does not define (its settings cannot be read). */
  table?: TableFacts;
  sweepIntervalSeconds: number | undefined;
  stallSeconds: number | undefined;
  retentionDays: number | undefined;
}

export interface TableFacts {
  partitionKey: string | undefined;
  sortKey: string | undefined;
  ttlAttribute: string | undefined;
  ttlEnabled: boolean;
  /** Index name to its [hash, range] key attributes. */
  indexes: Map<string, [string | undefined, string | undefined]>;
}

/** The worker must be able to wait the model's whole retry deadline and still write the step's outcome. */
export const MIN_WORKER_TIMEOUT_SECONDS = Math.ceil((DEFAULT_DEADLINE_MS + DEFAULT_RESERVE_MS) / 1000);
/** Lambda's longest timeout: CloudFormation refuses a function with a longer one. */
export const MAX_LAMBDA_TIMEOUT_SECONDS = 900;
/** The memory Lambda allows a function, in whole MB. */
export const LAMBDA_MEMORY_MB = { min: 128, max: 10_240 } as const;
/** SQS's largest receive count in a redrive policy. */
export const MAX_SQS_RECEIVE_COUNT = 1000;
/** AWS's advice for an SQS event source, so a message is not redelivered while its batch still runs. */
export const VISIBILITY_PER_TIMEOUT = 6;

export const FIFO_REQUIRED = 'the run queue must be a FIFO queue: one step of a run at a time (group = run), and deduplication of a repeated enqueue (id = run/version); a standard queue would run duplicate steps and circulate stale messages';

export function invariantErrors(facts: DeploymentFacts): string[] {
  const errors: string[] = [];
  const need = (value: number | undefined, what: string): value is number => {
    if (value === undefined || !Number.isFinite(value)) {
      errors.push(`${what} must be a concrete number at synth time so the runtime's safety settings can be checked`);
      return false;
    }
    return true;
  };

  if (facts.queueFifo !== true) errors.push(FIFO_REQUIRED);
  if (!facts.functionResponseTypes?.includes('ReportBatchItemFailures')) {
    errors.push('the worker\'s SQS event source must report batch item failures (ReportBatchItemFailures): without it one record to retry makes Lambda redeliver the whole batch, re-running steps of other runs and holding their FIFO groups');
  }
  if (need(facts.workerTimeoutSeconds, 'the worker timeout') && facts.workerTimeoutSeconds < MIN_WORKER_TIMEOUT_SECONDS) {
    errors.push(`the worker timeout (${facts.workerTimeoutSeconds} s) must be at least ${MIN_WORKER_TIMEOUT_SECONDS} s: the model's retry deadline (${DEFAULT_DEADLINE_MS / 1000} s) plus the ${DEFAULT_RESERVE_MS / 1000} s kept back to record the step's outcome; a shorter one cuts the model's retries short on every slow reply`);
  }
  if (facts.workerTimeoutSeconds !== undefined && facts.workerTimeoutSeconds > MAX_LAMBDA_TIMEOUT_SECONDS) {
    errors.push(`the worker timeout (${facts.workerTimeoutSeconds} s) must be at most ${MAX_LAMBDA_TIMEOUT_SECONDS} s, the longest Lambda allows: the deploy would fail`);
  }
  // Settings CloudFormation would refuse: said here, at synth, rather than as a failed deploy.
  if (facts.workerMemoryMb !== undefined && !(Number.isInteger(facts.workerMemoryMb) && facts.workerMemoryMb >= LAMBDA_MEMORY_MB.min && facts.workerMemoryMb <= LAMBDA_MEMORY_MB.max)) {
    errors.push(`the worker's memory size (${facts.workerMemoryMb} MB) must be a whole number of MB from ${LAMBDA_MEMORY_MB.min} to ${LAMBDA_MEMORY_MB.max}, what Lambda allows: the deploy would fail`);
  }
  if (facts.reservedConcurrency !== undefined && !(Number.isInteger(facts.reservedConcurrency) && facts.reservedConcurrency >= 0)) {
    errors.push(`the worker's reserved concurrency (${facts.reservedConcurrency}) must be a whole number, 0 or more: the deploy would fail`);
  }
  if (facts.maxConcurrency !== undefined && !Number.isInteger(facts.maxConcurrency)) {
    errors.push(`the event source's maximum concurrency (${facts.maxConcurrency}) must be a whole number: the deploy would fail`);
  } else if (facts.maxConcurrency !== undefined && facts.reservedConcurrency !== undefined && facts.maxConcurrency > facts.reservedConcurrency) {
    // AWS's advice for SQS event sources: a throttled record is not stepped, it stays hidden for the
    // visibility timeout (6x the worker's) and its receive counts toward the dead-letter queue.
    errors.push(`the event source's maximum concurrency (${facts.maxConcurrency}) must not be above the worker's reserved concurrency (${facts.reservedConcurrency}): the event source would start invocations Lambda throttles, and a throttled record waits out the visibility timeout and counts toward the dead-letter queue; limit the workers with maxConcurrency alone`);
  }
  if (facts.queueFifo === true && facts.deadLetterQueueFifo === false) {
    errors.push('the dead-letter queue must be FIFO like the run queue: SQS refuses a redrive policy from a FIFO queue to a standard one, and the deploy would fail');
  }
  if (need(facts.visibilityTimeoutSeconds, 'the queue\'s visibility timeout') && facts.workerTimeoutSeconds !== undefined
    && facts.visibilityTimeoutSeconds < VISIBILITY_PER_TIMEOUT * facts.workerTimeoutSeconds) {
    errors.push(`the queue's visibility timeout (${facts.visibilityTimeoutSeconds} s) must be at least ${VISIBILITY_PER_TIMEOUT}x the worker timeout (${VISIBILITY_PER_TIMEOUT * facts.workerTimeoutSeconds} s): a message that becomes visible while its step still runs is delivered to a second worker, which pays for the same model call`);
  }
  if (facts.maxReceiveCount === undefined) {
    errors.push(`the run queue needs a dead-letter queue with a receive count above ${DEFAULT_MAX_RECEIVES}: a message that keeps failing outside the engine would otherwise circulate forever`);
  } else if (!need(facts.maxReceiveCount, 'the dead-letter receive count')) {
    // Said by need.
  } else if (facts.maxReceiveCount <= DEFAULT_MAX_RECEIVES) {
    errors.push(`the dead-letter queue's receive count (${facts.maxReceiveCount}) must be above the engine's crash-loop limit (${DEFAULT_MAX_RECEIVES} tries): otherwise SQS moves a crash-looping run's message aside before the engine can fail the run with a reason, and the run stays "running" with nothing to move it`);
  } else if (!Number.isInteger(facts.maxReceiveCount) || facts.maxReceiveCount > MAX_SQS_RECEIVE_COUNT) {
    errors.push(`the dead-letter queue's receive count (${facts.maxReceiveCount}) must be a whole number up to ${MAX_SQS_RECEIVE_COUNT}, the most SQS allows: the deploy would fail`);
  }
  if (need(facts.batchSize, 'the batch size') && !(Number.isInteger(facts.batchSize) && facts.batchSize >= 1 && facts.batchSize <= 10)) {
    errors.push(`the batch size (${facts.batchSize}) must be a whole number between 1 and 10 (the most a FIFO event source takes)`);
  }
  if (need(facts.sweepIntervalSeconds, 'the sweep interval') && facts.sweepIntervalSeconds * 1000 >= DEFAULT_TIMER_LOOKAHEAD_MS) {
    errors.push(`the sweeper must run more often than every ${DEFAULT_TIMER_LOOKAHEAD_MS / 60_000} minutes (it sends the timers of waits due within that window), got every ${facts.sweepIntervalSeconds} s`);
  }
  if (need(facts.stallSeconds, 'the stall window') && facts.workerTimeoutSeconds !== undefined && facts.stallSeconds <= facts.workerTimeoutSeconds) {
    errors.push(`the sweeper's stall window (${facts.stallSeconds} s) must be longer than the worker timeout (${facts.workerTimeoutSeconds} s): a run inside a step would be re-driven while its worker still runs`);
  }
  if (need(facts.retentionDays, 'the retention') && !(Number.isInteger(facts.retentionDays) && facts.retentionDays > 0)) {
    // Whole days: the bucket's lifecycle rule counts old versions' days in whole numbers.
    errors.push(`the checkpoint history retention must be a positive whole number of days, got ${facts.retentionDays}`);
  }
  if (facts.table) errors.push(...tableErrors(facts.table));
  return errors;
}

function tableErrors(table: TableFacts): string[] {
  const errors: string[] = [];
  if (table.partitionKey !== PK || table.sortKey !== SK) {
    errors.push(`the table's key must be ${PK} (partition) and ${SK} (sort), the layout the runtime reads (lib/aws/table-layout.ts); got ${table.partitionKey} / ${table.sortKey}`);
  }
  if (!table.ttlEnabled || table.ttlAttribute !== TTL_ATTRIBUTE) {
    errors.push(`the table's time to live must be on "${TTL_ATTRIBUTE}", the attribute the runtime writes on history rows, kept events and finished wait keys; got ${table.ttlAttribute ? `"${table.ttlAttribute}"` : 'none'}: history would grow forever`);
  }
  for (const [name, hash, range] of [[STATUS_INDEX, STATUS_KEY, STATUS_SORT], [WAIT_INDEX, WAIT_SHARD, WAIT_DEADLINE]] as const) {
    const index = table.indexes.get(name);
    if (!index || index[0] !== hash || index[1] !== range) {
      errors.push(`the table needs the global secondary index ${name} (${hash}, ${range}): the runtime lists runs, finds stalled ones and due wait timers through it`);
    }
  }
  return errors;
}
