/**
 * Errors are split by what a worker should do next:
 * - permanent: retrying cannot help; the run fails at once with the reason.
 * - transient: retrying may help; it counts toward the step's 3 failures (30 for a model outage).
 * Everything else (a bug, a crash) is treated as transient by the engine.
 *
 * Each class here is marked (class-mark.ts): an agent's tool may throw one from another copy of this
 * package, and the engine must still know it for what it is.
 */
import { isInstanceOf, markClass } from './class-mark.ts';

export class StepwiseError extends Error {
  readonly permanent: boolean = false;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }

  /** Inherited by every subclass, with `this` the class on the right of `instanceof`. */
  static override [Symbol.hasInstance]<T>(this: abstract new (...args: never[]) => T, value: unknown): value is T {
    return isInstanceOf(this, value);
  }
}

export class PermanentError extends StepwiseError {
  override readonly permanent = true;
}

/**
 * `retryAfterMs`: how long the thing that failed asked to be left alone (a model's or an API's
 * retry-after). The step's next try waits that long when it is longer than the backoff (at most
 * MAX_RETRY_AFTER_MS): tried sooner, it would only fail again and count against the run.
 */
export class TransientError extends StepwiseError {
  readonly retryAfterMs: number | undefined;
  constructor(message: string, options?: { cause?: unknown; retryAfterMs?: number | undefined }) {
    super(message, options);
    const after = options?.retryAfterMs;
    this.retryAfterMs = after !== undefined && Number.isFinite(after) && after > 0 ? after : undefined;
  }
}

/**
 * The model API could not be reached, or was overloaded or rate-limited (a timeout, a dropped connection,
 * 429, 5xx, 529), after the client's own retries: an outage of the provider, not a fault of this step. A
 * step tries on through one of about half an hour (MAX_MODEL_UNAVAILABLE_FAILURES) before it fails its run,
 * where other transient errors fail it at the third try. A Model of your own throws it for the same cases.
 */
export class ModelUnavailableError extends TransientError {}

/**
 * A tool ran past its time limit (`timeoutMs`, default 15 minutes), or past the worker's own deadline: a
 * failed try of its step. Its `ctx.signal` aborted; whatever it still does, the step is tried again.
 */
export class ToolTimeoutError extends TransientError {}

/**
 * The model API refused the credentials (401, 403) or to bill their account (402, a spend limit reached),
 * or the key cannot be read: no step can be tried until the key or its account is fixed. The work pauses (the message comes back later, after the key is read again); it is
 * neither a failed attempt nor a reason to fail the run.
 */
export class ModelKeyError extends StepwiseError {}

/** A write that was based on an older version of the run: another worker got there first. */
export class StaleVersionError extends StepwiseError {
  constructor(readonly runId: string, readonly expectedVersion: number, detail = '') {
    super(`stale write for run ${runId}: version ${expectedVersion} is no longer the latest${detail ? ` (${detail})` : ''}`);
  }
}

/**
 * An operator's request (cancel, answer, retry, fork) that lost to the run at each of its tries: said as
 * that, with what to do, where the store's own words ("stale write ... no longer the latest") named neither.
 */
export function movedOnText(error: StaleVersionError): string {
  return `run ${error.runId} moved on under this request at each of its tries (a step or an answer was written first, the last at version ${error.expectedVersion + 1} or later): look at the run, and ask again if it still applies`;
}

export class UnknownRunError extends PermanentError {
  constructor(readonly runId: string) {
    super(`unknown run: ${runId}`);
  }
}

/** The stored state cannot be read by any code: the run is failed with this reason, never retried. */
export class UnreadableCheckpointError extends PermanentError {
  constructor(readonly runId: string, readonly version: number, reason: string) {
    super(`checkpoint ${version} of run ${runId} is unreadable: ${reason}`);
  }
}

/**
 * A record (`record`: "head", "step 3", "decision", "wait") of a newer format than this code reads: left
 * alone for a newer worker, nothing written. The message says which format is needed.
 */
export class NewerFormatError extends StepwiseError {
  constructor(
    readonly runId: string, readonly record: string, readonly kind: string,
    readonly formatVersion: number, readonly supported: number, message?: string,
  ) {
    super(message ?? `${runId ? `run ${runId}: ` : ''}${record} has ${kind} format ${formatVersion}, but this code reads ${kind} format ${supported} at most: it needs code that reads ${kind} format ${formatVersion}; left as it is for a newer worker`);
  }

  /** The format a worker needs to resume the run. */
  get needs(): string {
    return `${this.kind} format ${this.formatVersion}`;
  }
}

/**
 * A record with fields this code does not know, in a format it does: written by newer code that did not
 * bump the format, or damaged. Refused like a newer format (left as it is, nothing written) rather than
 * read without them, which would drop them at the next write.
 */
export class UnknownFieldError extends NewerFormatError {
  constructor(runId: string, record: string, kind: string, formatVersion: number, readonly fields: string[]) {
    super(runId, record, kind, formatVersion, formatVersion,
      `run ${runId}: ${record} has fields this code does not know in ${kind} format ${formatVersion} (${fields.join(', ')}): refused, not stripped; left as it is for the code that wrote it`);
  }

  override get needs(): string {
    return `code that knows ${this.fields.join(', ')}`;
  }
}

/**
 * A run recorded with another agent than the worker's: its tools and goal belong together, so the worker
 * must not step it. Not permanent: the run is fine, only this worker is the wrong one.
 */
export class WrongAgentError extends StepwiseError {
  constructor(readonly runId: string, readonly runAgent: string, readonly workerAgent: string) {
    super(`run ${runId} belongs to agent "${runAgent}" but this worker runs agent "${workerAgent}"`);
  }

  /** What to do about it, including the case of a renamed agent. */
  get fix(): string {
    return `Run a worker of "${this.runAgent}"; or, if "${this.runAgent}" was renamed to "${this.workerAgent}", add formerNames: ["${this.runAgent}"] to its defineAgent`;
  }
}

/** An idempotency key used again for different arguments: a bug in the caller, never a silent skip. */
export class IdempotencyKeyReuseError extends PermanentError {
  constructor(readonly key: string) {
    super(`idempotency key ${key} was already used with different arguments`);
  }
}

/**
 * Another attempt holds the key's claim, until `leaseUntil` unless its holder renews it. Not a failed
 * attempt of the step: the engine hands the message back for `retryAfterMs` and counts nothing.
 */
export class IdempotencyInProgressError extends TransientError {
  constructor(readonly key: string, readonly leaseUntil: number, override readonly retryAfterMs: number) {
    super(`idempotency key ${key} is being applied by another attempt; its claim ends at ${Number.isFinite(leaseUntil) ? new Date(leaseUntil).toISOString() : 'an unknown time'} unless renewed`);
  }
}

/**
 * Thrown into an effect's signal when its claim on an idempotency key may be another attempt's now.
 * `taken`: the store said so (a renewal found the key another attempt's). Otherwise this holder gave the
 * claim up on its own: no renewal was confirmed for as long as another attempt must wait to take it over.
 * Neither is a failure of the step: the engine counts a taken claim as no try (the other attempt applies the
 * effect), and a claim given up as a crash of this worker (lib/engine/advance.ts).
 */
export class ClaimLostError extends TransientError {
  readonly taken: boolean;
  /** `givenUp`: why this holder gave the claim up; without it, the store said another attempt took the key. */
  constructor(readonly key: string, givenUp?: string) {
    super(`the claim on idempotency key ${key} was lost: ${givenUp ?? 'the lease ran out and another attempt took the key'}`);
    this.taken = givenUp === undefined;
  }
}

/**
 * The blob store refused a step's output for a reason its own retries cannot mend (S3's 4xx: no such
 * bucket, access denied, a KMS key the role may not use): a failed try of the step, which names the
 * cause in the run's reason. An outage or a dropped connection is not this: it escapes, and the message
 * comes back, as after a crash.
 */
export class BlobRefusedError extends TransientError {}

/**
 * A blob the store holds under its ref whose bytes are not the ref's (replaced by hand, cut short, a body
 * that does not decompress): lost as surely as a missing one, and reading it again gives the same bytes,
 * so it is not a failure to retry. Named, with what is wrong, wherever it is read.
 */
export class DamagedBlobError extends PermanentError {
  constructor(readonly ref: string, readonly why: string, options?: { cause?: unknown }) {
    super(`blob ${ref} is damaged in the blob store: ${why}`, options);
  }
}

/** Thrown by a tool to hand a failure to the model as the step's result, instead of retrying the step. */
export class ToolError extends StepwiseError {}

export class InvalidInputError extends PermanentError {}

/**
 * A start with the id of another agent's run: that run is not this agent's to take (its tools would work
 * the other's goal), and nothing changed. Bad input to the CLI (exit 2), a conflict to the API (409), as a
 * start with the id of a run of another goal is.
 */
export class RunIdTakenError extends InvalidInputError {
  constructor(readonly runId: string, readonly runAgent: string, agent: string) {
    super(`run ${runId} belongs to agent "${runAgent}", not "${agent}": use that agent's module or another run id; if "${runAgent}" was renamed to "${agent}", add formerNames: ["${runAgent}"] to its defineAgent`);
  }
}

/**
 * A fork asked for under the id of a run that is not that fork: the run is someone else's, and nothing
 * changed. Bad input to the CLI (exit 2), a conflict to the API (409), as a start's taken id is.
 */
export class RunIdInUseError extends InvalidInputError {
  constructor(readonly runId: string, message: string) {
    super(message);
  }
}

/**
 * An operation the run's status refuses: a retry of a run that is running or cancelled, a cancel of one
 * that has ended. Nothing changed. Bad input to the CLI (exit 2), a conflict to the API (409), where it was
 * a 400 a client could not tell from a malformed request: a retry whose first answer was lost, asked again,
 * finds the run running.
 */
export class RunStateError extends InvalidInputError {
  constructor(readonly runId: string, readonly status: string, message: string) {
    super(message);
  }
}

/**
 * A delete of a run that has ended, refused while an effect of it still holds its idempotency key (a
 * tool's timeoutMs ended the try while the effect went on; a failed or cancelled run's last effect): the
 * delete would drop the claim, and a new run of the id would apply the effect beside the old one. Nothing
 * was deleted; `retryAfterMs` says when the claim ends unless its holder renews it.
 */
export class EffectStillRunningError extends RunStateError {
  constructor(runId: string, status: string, readonly key: string, readonly leaseUntil: number, readonly retryAfterMs: number) {
    super(runId, status, `run ${runId} (${status}) cannot be deleted yet: an effect of it is still running under idempotency key ${key}, whose claim ends at ${Number.isFinite(leaseUntil) ? new Date(leaseUntil).toISOString() : 'an unknown time'} unless its holder renews it; nothing was deleted: delete it again in ${Math.ceil(retryAfterMs / 1000)} s, once the effect has finished`);
  }
}

/**
 * A step a run has no record of: past its last completed step, or the step it waits at (no result until
 * answered). Bad input to a fork and to the CLI (exit 2); to `GET /runs/:id/steps/:step`, a 404, as the
 * inspector's page of such a step is: the run is there and the step is not.
 */
export class NoSuchStepError extends InvalidInputError {
  constructor(readonly runId: string, readonly step: number, message: string) {
    super(message);
  }
}

// Their names in the registry are their class names: the same in every copy.
for (const [name, cls] of Object.entries({
  StepwiseError, PermanentError, TransientError, ModelUnavailableError, ToolTimeoutError, ModelKeyError,
  StaleVersionError, UnknownRunError, UnreadableCheckpointError, NewerFormatError, UnknownFieldError,
  WrongAgentError, IdempotencyKeyReuseError, IdempotencyInProgressError, ClaimLostError, ToolError, InvalidInputError,
  RunIdTakenError, RunIdInUseError, RunStateError, NoSuchStepError, BlobRefusedError, DamagedBlobError,
})) markClass(cls, name);

export function isPermanent(error: unknown): boolean {
  return error instanceof StepwiseError && error.permanent;
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}
