import { randomUUID } from 'node:crypto';
import type { ToolContext, ToolDefinition } from '../agent.ts';
import { TOOL_NAME, gatesAny, needsApproval, toolSpecs, worksRunsOf } from '../agent.ts';
import { approvalOfCall, approvedCall } from '../core/approval-gate.ts';
import { canonicalValue } from '../core/canonical-json.ts';
import { decodeState, heldHead } from '../core/codec.ts';
import { heldAfter, summariesDue } from '../core/condensed.ts';
import { checkDecision } from '../core/drift.ts';
import { failureText } from '../core/failure-text.ts';
import {
  BlobRefusedError, ClaimLostError, DamagedBlobError, IdempotencyInProgressError, ToolTimeoutError, InvalidInputError, ModelKeyError, NewerFormatError, PermanentError, ToolError, TransientError, UnknownRunError,
  UnreadableCheckpointError, WrongAgentError, errorMessage,
} from '../core/errors.ts';
import { idempotencyKey } from '../core/keys.ts';
import { parseToolInput } from '../core/tool-input.ts';
import { withFields } from '../core/objects.ts';
import { readableUsage, replyProblem } from '../core/model-reply.ts';
import { excerpt, renderStepPrompt } from '../core/prompt.ts';
import { revealedJson } from '../core/printable.ts';
import { DEFAULT_INLINE_LIMIT, outputText, shapeResult, type ShapedResult } from '../core/result.ts';
import { usageAdded, type Decision, type RunState, type RunStatus, type StepRecord, type Usage, type WaitRecord } from '../core/state.ts';
import { beginWait, isWaitRequest, waitRecordFor, type WaitRequest } from '../core/waits.ts';
import { cap, capReached, complete, completeStep, recordFailure, stepRecordOf } from '../core/transitions.ts';
import { cancelState, overBudgetState } from '../core/operate.ts';
import { modelIdOf, overBudget } from './budget.ts';
import { blockCost, unheldBlocksPriced } from '../llm/cost.ts';
import type { CheckpointWrite, Delivery, ModelReply, ModelRequest, OnceOptions, QueueWork } from '../ports.ts';
import type { EngineDeps } from './deps.ts';
import { resumeLoad, stepCacheOf } from './step-cache.ts';
import { ToolTime, isPromiseLike } from './tool-time.ts';

export type Advance =
  /** A checkpoint was written: a step (`appended`: its record), a failed attempt, a wait, or the run's end. */
  /**
   * `queued`: the queue work the checkpoint's own transaction did (AdvanceOptions.queueWork); `received`:
   * what its receive took, this worker's next deliveries.
   */
  /**
   * `added`: the usage this checkpoint added to the run's (a step's model call, a discarded reply, the DONE
   * reply, the call that began a wait), so a worker's metrics count each call once, whatever happens to
   * the run later (an answer outside the worker, a retry).
   */
  | { kind: 'advanced'; version: number; state: RunState; bytes: number; appended?: StepRecord; queued?: QueueWork; received?: Delivery[]; retryAfterMs?: number; added?: Usage }
  /**
   * The run is not running (done, failed, waiting): nothing to do. `failedNow`: this call failed it, its
   * latest checkpoint unreadable (the data kept), so a worker counts the run failed once.
   */
  | { kind: 'idle'; version: number; status: RunStatus; failedNow?: true }
  /** The message was for an older version: another delivery already advanced the run. */
  | { kind: 'stale-message'; version: number; status: RunStatus };

export interface AdvanceOptions {
  /** The version the caller expects; a different latest version means the caller is stale. */
  expectVersion?: number;
  /**
   * How many times the queue has delivered this message. Above 1, an earlier delivery may have started
   * the step and died, so this one counts itself as a restart before it begins (addRestarts).
   */
  receiveCount?: number;
  /** Tries of one step beyond this fail the run instead of stepping it: the step keeps killing its worker. */
  maxTries?: number;
  /**
   * The queue work to fold into the checkpoint this step writes, given the state and the version it
   * writes, and the retry-after of a failed try (TransientError.retryAfterMs); used only on a store that
   * carries queue work (CheckpointStore.carriesQueueWork).
   */
  queueWork?: (next: RunState, version: number, retryAfterMs?: number) => QueueWork | undefined;
}

/**
 * Runs exactly one step of a run: load the latest checkpoint, ask the model (unless a decision is already
 * recorded), run the tool with the step's idempotency key, write the next checkpoint conditional on the
 * version it loaded. Every write is fenced, so a stale worker is rejected with StaleVersionError.
 */
export async function advance(deps: EngineDeps, runId: string, options: AdvanceOptions = {}): Promise<Advance> {
  const cache = stepCacheOf(deps.store);
  const known = cache.get(runId);
  let stored = await deps.store.load(runId, resumeLoad(known));
  if (!stored) throw new UnknownRunError(runId);
  const version = stored.version;
  const base: Base = { version, queueWork: options.queueWork };
  if (options.expectVersion !== undefined && options.expectVersion !== version) {
    return { kind: 'stale-message', version, status: stored.status };
  }
  if (stored.status !== 'running') {
    cache.delete(runId);
    return { kind: 'idle', version, status: stored.status };
  }

  let state: RunState;
  try {
    state = decodeState(stored, known);
    // A dollar budget prices each step by the model that chose it: from its block's summary (format 2 on),
    // else from its record, so a run with a block summarised without its cost reads every record.
    if (state.stepsFrom && state.budget?.usd !== undefined && !unheldBlocksPriced(state)) {
      const { condensed } = state;
      stored = (await deps.store.load(runId))!;
      state = { ...decodeState(stored), condensed: condensed! };
    }
  } catch (error) {
    if (!(error instanceof UnreadableCheckpointError)) throw error;
    cache.delete(runId);
    try {
      // Judge the checkpoint on a full read, never on what this process remembered or a bounded read.
      stored = (await deps.store.load(runId))!;
      state = decodeState(stored);
    } catch (again) {
      if (!(again instanceof UnreadableCheckpointError)) throw again;
      return markUnreadable(deps, runId, stored.version, again.message);
    }
  }
  // Another agent's run: its goal under this agent's tools could do anything. Before any write or call.
  if (!worksRunsOf(deps.agent, state.agent)) throw new WrongAgentError(runId, state.agent, deps.agent.name);
  base.usage = state.usage;
  const n = state.step + 1;
  if (deps.probe) await deps.probe('C1', { runId, step: n });

  // A step boundary: a cancel asked for since the last checkpoint stops the run before anything else
  // happens. The step that was running when it came has committed (its commit kept the request).
  if (stored.cancelRequested !== undefined) {
    return commit(deps, base, cancelState(state, stored.cancelRequested, deps.clock.now(), uncountedUsage(state.pending, version)));
  }

  // Only a delivery that got this far starts the step: one that failed to load the run (a throttled or
  // locked store) spent nothing. Only a redelivery writes the count, so the common path writes nothing.
  const restarts = (options.receiveCount ?? 1) > 1 ? await deps.store.addRestarts(runId, version, 1) : stored.restarts ?? 0;
  // This delivery included. A paused first delivery leaves -1, which a new message (a redrive) must not
  // turn into 0 tries.
  const tries = Math.max(1, restarts + 1);

  const now = () => deps.clock.now();
  const pendingUsage = uncountedUsage(state.pending, version);
  if (options.maxTries !== undefined && tries > options.maxTries) {
    // A recorded call says where it crashed: in or after that tool (a side-effecting one), not the model.
    const during = state.pending ? `, in or after its recorded call of tool ${state.pending.tool}` : '';
    const error = new PermanentError(`it was started ${tries} times without finishing (its worker keeps crashing${during})`);
    return commit(deps, base, recordFailure(state, error, now(), usageOnly(pendingUsage)));
  }

  let decision = state.pending;
  let tool: ToolDefinition | undefined;
  let input: unknown;
  let uncounted = pendingUsage;
  // A call a person approved at the last step (a tool with `approval`) is this step's, as it was made: the
  // model is not asked, so nothing it says now changes the call. Past the cap it waits for a retry.
  const approved = decision || !gatesAny(deps.agent) ? undefined : approvedCall(state, (name) => needsApproval(deps.agent, name));
  if (approved) {
    if (capReached(state)) return commit(deps, base, cap(state, now()));
    decision = { step: n, tool: approved.tool, input: approved.input, at: now(), atVersion: version };
  }
  if (decision) {
    // Code drift: the tool renamed or removed, or its input changed, since the decision was recorded. The
    // failure keeps the decision, so a retry after redeploying runs this very call.
    const resumable = await checkDecision(decision, deps.agent, runId);
    if (!resumable.ok) return commit(deps, base, recordFailure(state, new PermanentError(resumable.problem), now(), usageOnly(uncounted)));
    tool = resumable.tool;
    input = resumable.input;
    // An approved call with a side effect is kept before it runs, as the model's are: a crash then re-runs
    // this call under this key.
    if (approved && tool.sideEffect) {
      decision.idempotencyKey = idempotencyKey(runId, n);
      const refused = await recordDecision(deps, base, state, decision, uncounted);
      if (refused) return refused;
      // The same crash point as a model's call kept before its tool runs, so crash tests reach this one.
      if (deps.probe) await deps.probe('C3', { runId, step: n });
    }
  } else {
    // A budget is checked before the call that would spend more: the run goes past it by at most one step.
    if (state.budget) {
      const over = overBudget(state, workerModelId(deps));
      if (over) return commit(deps, base, overBudgetState(state, over, now()));
    }
    // At the cap the model is still asked, so a goal done in exactly stepCap steps completes; only DONE
    // is accepted then.
    const atCap = capReached(state);
    let reply: ModelReply;
    let answered: unknown;
    try {
      const request: ModelRequest = { runId, step: n, prompt: renderStepPrompt(state), tools: toolSpecs(deps.agent), settings: deps.agent.settings ?? {} };
      if (deps.signal) request.signal = deps.signal;
      reply = answered = await deps.model.decide(request);
      const problem = replyProblem(reply);
      if (problem) throw new TransientError(`the model ${deps.model.name} returned a reply the engine cannot record: ${problem}`);
    } catch (error) {
      if (error instanceof ModelKeyError) {
        // Not a try of the step: the work waits for a valid key. Taking this delivery's start back keeps
        // a long pause from adding up to a crash loop.
        await deps.store.addRestarts(runId, version, -1);
        throw error;
      }
      // A reply the engine cannot record was still a call made and billed: its usage is counted when it can be read.
      return commitFailure(deps, base, state, asStepError(error), usageOnly(readableUsage(answered)));
    }
    if (deps.probe) await deps.probe('C2', { runId, step: n });

    if (reply.kind === 'done') {
      try {
        return await commit(deps, base, complete(state, reply.summary, reply.usage, now()));
      } catch (error) {
        // A summary too large for an item, which S3 refused to keep: a failed try, as for a refused output.
        if (!(error instanceof BlobRefusedError)) throw error;
        return commitFailure(deps, base, state, error, usageOnly(reply.usage));
      }
    }
    if (atCap) return commit(deps, base, cap(state, now(), reply.usage));
    if (reply.kind === 'invalid') {
      const note = `Your previous reply could not be used (${reply.reason}). Call exactly one tool, or reply with DONE and a one-paragraph summary.`;
      return commit(deps, base, recordFailure(state, new TransientError(`model reply unusable: ${reply.reason}`), now(), { retryNote: note, ...(reply.usage ? { usage: reply.usage } : {}) }));
    }
    tool = deps.agent.tools.find((t) => t.name === reply.tool);
    if (!tool) {
      const names = deps.agent.tools.map((t) => t.name).join(', ');
      const named = unknownToolName(reply.tool);
      return commitErrorStep(deps, state, base, n, { ...reply, tool: named }, `unknown tool ${TOOL_NAME.test(named) ? `"${named}"` : named}; the tools are: ${names}`, reply.usage);
    }
    // The call as every later try reads it back from its record: keys in order, a -0 or an Infinity (JSON's
    // 1e400) as JSON writes them. Parsed as the model's reply had it, a z.record's or z.unknown()'s keys
    // came to the tool in the model's order on the first try and sorted on a retry after a crash.
    const call = canonicalValue(reply.input);
    const parsed = await parseToolInput(tool.input, call);
    if ('thrown' in parsed) {
      // The schema's own bug, not the model's: a failed try like a tool that threw, its reason what it threw.
      const message = `tool ${tool.name}: its input schema threw on the model's arguments (a refine or transform should report a bad input with ctx.addIssue): ${failureText(parsed.thrown)}`;
      return commitFailure(deps, base, state, parsed.thrown, { ...usageOnly(reply.usage), message });
    }
    if (!parsed.ok) return commitErrorStep(deps, state, base, n, reply, `invalid arguments for ${tool.name}: ${parsed.issues}`, reply.usage);
    input = parsed.data;
    // The call as the model made it, not as parsed: a retry parses it again (checkDecision), and a
    // transformed value (a pipe's number, a Date) would not parse as the input it came from. Fields set
    // one by one, not spread from conditional objects: this runs at every step.
    decision = { step: n, tool: tool.name, input: call, at: now(), atVersion: version };
    if (tool.sideEffect) decision.idempotencyKey = idempotencyKey(runId, n);
    if (reply.usage) decision.usage = reply.usage;
    const model = answeringModel(deps, reply);
    if (model) decision.model = model;
    uncounted = reply.usage;
    // A tool a person approves: the call waits for their answer instead of running (lib/core/approval-gate.ts).
    if (tool.approval) return beginWaitStep(deps, state, base, decision, approvalOfCall(tool, reply.input, tool.approval, input), uncounted);
    // Only side effects need the decision kept: a crash after this point must re-run this exact call
    // with this key, never ask the model again. A read-only call can simply be asked for again.
    if (tool.sideEffect) {
      const refused = await recordDecision(deps, base, state, decision, uncounted);
      if (refused) return refused;
      if (deps.probe) await deps.probe('C3', { runId, step: n });
    }
  }

  if (!tool) throw new Error(`advance: no tool for step ${n}`);

  let output: unknown;
  let ok = true;
  let attempt: ToolTry | undefined;
  try {
    // Every try of this step so far, recorded failures and restarts after a killed worker: 1 on the first.
    const time = new ToolTime(tool, deps.signal);
    attempt = toolContext(deps, state, n, state.failures + tries, decision, time);
    const tried = attempt;
    const ran = time.run(() => tried.run(() => tool.run(input, tried.context)));
    output = ran instanceof Promise ? await ran : ran;
  } catch (caught) {
    // Out of time while its once still waited for the key: no effect of this try began, and the key is
    // another attempt's. Counted as a failed try, a tool whose timeoutMs is shorter than the ledger's watch
    // of a dead holder's claim (41 s on DynamoDB) failed its run before any try could take the key.
    const error = caught instanceof ToolTimeoutError ? (await attempt?.heldAtTimeout()) ?? caught : caught;
    // The try's claim on its key was lost while its effect ran, whatever the tool then threw: the try's
    // outcome is not the step's. Taken by another attempt, which applies the effect and commits the step:
    // no try of this step, and this delivery's start is taken back. Given up by this holder (no renewal
    // confirmed, the store out of reach): this worker's crash, counted as one, and nothing is written,
    // where a failure recorded here would fence off the checkpoint of an attempt that may hold the key.
    const lost = attempt?.claimLost();
    if (lost) {
      if (lost.taken) await deps.store.addRestarts(runId, version, -1);
      throw lost;
    }
    // Another attempt holds the key's live claim: not a try of this step. The caller waits for the lease
    // and writes nothing; taking this delivery's start back keeps such waits from adding up to a crash loop.
    // So with a key whose record newer code wrote: the run waits for a newer worker.
    if (error instanceof IdempotencyInProgressError || error instanceof NewerFormatError) {
      await deps.store.addRestarts(runId, version, -1);
      throw error;
    }
    // A ToolError is an answer for the model ("no such table"); anything else is a failed attempt. The
    // model call that chose the tool was paid for, so its usage is counted now, and only now. A tool may
    // throw anything, so its reason is what it threw in full (causes, gathered errors), not its message.
    if (!(error instanceof ToolError)) return commitFailure(deps, base, state, error, { ...usageOnly(uncounted), message: failureText(error) });
    output = error.message;
    ok = false;
  }
  if (deps.probe) await deps.probe('C4', { runId, step: n });
  if (isWaitRequest(output)) {
    // Its answer would read as the approval of its call, and run it again.
    if (tool.approval) return commit(deps, base, recordFailure(state, new PermanentError(`tool ${tool.name} needs approval, so it may not itself wait (it returned a wait request): wait in another tool`), now(), usageOnly(uncounted)));
    return beginWaitStep(deps, state, base, decision, output, uncounted);
  }

  let text: string;
  try {
    text = outputText(output, tool.name);
  } catch (error) {
    // The tool's own bug, the same on every try: the run fails with it at once, where a crash would be
    // redelivered until the worker counted as crashing (and a side effect without once() re-run each time).
    return commit(deps, base, recordFailure(state, error, now(), usageOnly(uncounted)));
  }
  const shaped = shapeResult(text, ok, deps.agent.settings?.inlineLimit ?? DEFAULT_INLINE_LIMIT);
  return await commitOutput(deps, base, state, decision, shaped, uncounted);
}

/**
 * The step's record and checkpoint, with its output stored first when it is large. A store whose database
 * holds the blobs writes it in the checkpoint's transaction (CheckpointStore.carriesBlobs): a crash at C5
 * then leaves no blob at all, not even an orphan. `uncounted`: the model call's usage no commit has counted
 * yet (none for a recorded decision an earlier try counted): the step counts it, or a failed try does.
 */
async function commitOutput(deps: EngineDeps, base: Base, state: RunState, decision: Decision, shaped: ShapedResult, uncounted: Usage | undefined): Promise<Advance> {
  const carried = shaped.blob && deps.store.carriesBlobs ? [shaped.blob] : undefined;
  if (shaped.blob) {
    if (!carried) {
      try {
        await deps.blobs.put(shaped.blob.ref, shaped.blob.data);
      } catch (error) {
        // Refused (no bucket, no access): a failed try that names the cause, where an escape would be
        // redelivered until the run failed as a crashing worker. An outage escapes, as a crash would.
        if (!(error instanceof BlobRefusedError)) throw error;
        return commitFailure(deps, base, state, error, usageOnly(uncounted));
      }
    }
    if (deps.probe) await deps.probe('C5', { runId: state.runId, step: decision.step });
  }
  const record = stepRecordOf(decision, shaped.result, deps.workerId);
  try {
    // Awaited, not returned: an async function that returns a promise takes two more turns of the
    // microtask queue to settle with it, at every step.
    return await commit(deps, base, completeStep(state, record, deps.clock.now(), { countUsage: uncounted !== undefined }), record, carried);
  } catch (error) {
    // A record too large for an item (an input or an inline output over the store's limit), which S3
    // refused to keep: a failed try, as for the output by reference above.
    if (!(error instanceof BlobRefusedError)) throw error;
    return commitFailure(deps, base, state, error, usageOnly(uncounted));
  }
}

/**
 * Keeps a side-effecting call before it runs; a failed try when the store's S3 refused its input (a value
 * too large for an item). Escaped, the message came back at every delivery, the model asked again each time
 * (nothing recorded its call), until the run failed as a crashing worker without S3's answer.
 */
async function recordDecision(deps: EngineDeps, base: Base, state: RunState, decision: Decision, uncounted: Usage | undefined): Promise<Advance | undefined> {
  try {
    await deps.store.recordDecision(state.runId, base.version, decision);
    return undefined;
  } catch (error) {
    if (!(error instanceof BlobRefusedError)) throw error;
    return commitFailure(deps, base, state, error, usageOnly(uncounted));
  }
}

/** The usage of a recorded decision that no commit has counted yet: none has, while the run is still at its version. */
function uncountedUsage(pending: Decision | undefined, version: number): Usage | undefined {
  if (!pending) return undefined;
  return pending.atVersion !== undefined && pending.atVersion < version ? undefined : pending.usage;
}

function usageOnly(usage: Usage | undefined): { usage?: Usage } {
  return usage ? { usage } : {};
}

/**
 * A wait tool asked to wait: save the run as waiting with its wait record (lib/core/waits.ts). A wait no
 * run should enter (no approver, an unbounded sleep) is an answer for the model, like invalid arguments.
 * `uncounted`, as commitOutput's: a recorded decision's usage a failed try counted is not counted again.
 */
async function beginWaitStep(deps: EngineDeps, state: RunState, base: Base, decision: Decision, request: WaitRequest, uncounted: Usage | undefined): Promise<Advance> {
  let wait: WaitRecord;
  try {
    wait = waitRecordFor(request.spec, decision, randomUUID(), deps.clock.now(), deps.agent.settings?.inlineLimit);
  } catch (error) {
    if (!(error instanceof InvalidInputError)) throw error;
    return commitErrorStep(deps, state, base, decision.step, decision, `cannot wait: ${error.message}`, uncounted);
  }
  try {
    return await commit(deps, base, beginWait(state, wait, deps.clock.now(), { countUsage: uncounted !== undefined }));
  } catch (error) {
    // A wait too large for an item (its call's input, an approval's request), which S3 refused to keep: a
    // failed try, as for a refused output. Escaped, its message came back at every delivery.
    if (!(error instanceof BlobRefusedError)) throw error;
    return commitFailure(deps, base, state, error, usageOnly(uncounted));
  }
}

/** One try's context, and `run`, which calls the tool and takes its outcome when it settles. */
interface ToolTry {
  context: ToolContext;
  /**
   * The tool's return value (or promise of it) as the step takes it, a synchronous throw included. A
   * ctx.once still running then (not awaited) is waited for, within the try's time, and the try fails;
   * after it, ctx.once is refused.
   */
  run(call: () => unknown): unknown;
  /**
   * When the try's time ran out while its ctx.once still waited for the key (another attempt's claim,
   * which a DynamoDB ledger watches before taking it over), the ledger's own answer to that wait: the key
   * is held, as when the wait is refused at once. Undefined for any other timeout.
   */
  heldAtTimeout(): Promise<IdempotencyInProgressError | undefined>;
  /** Why the effect's signal aborted when its claim on the key was lost (ClaimLostError); undefined if it was not. */
  claimLost(): ClaimLostError | undefined;
}

/** How long a timed-out try waits for its once, still claiming its key, to give the ledger's answer. */
const CLAIM_ANSWER_MS = 2_000;

function toolContext(deps: EngineDeps, state: RunState, step: number, attempt: number, decision: Decision, time: ToolTime): ToolTry {
  const { runId } = state;
  const key = decision.idempotencyKey ?? idempotencyKey(runId, step);
  // One effect per key. A second once after the first was applied got the first's result, its own effect
  // never run; one while the first still ran (nested, or not awaited) found the key held and was handed
  // back as though another try held it, for good when nested. Once more after a failed effect is a retry.
  let onceState: 'none' | 'running' | 'applied' = 'none';
  let running: Promise<unknown> | undefined;
  // Whether the ledger has handed this try the key and begun its effect, and the signal it gave the effect.
  let effectBegun = false;
  let effectSignal: AbortSignal | undefined;
  // Set when the tool has returned or thrown: a once called later (from a timer, a callback kept past the
  // return) ran its effect outside the step, after the checkpoint that told the model the step's result.
  let over = false;
  const applyOnce = async <T>(effect: (signal: AbortSignal) => T | Promise<T>, options: OnceOptions | undefined): Promise<T> => {
    // After a timeout too: the try has failed, and the next one is the effect's to apply.
    if (over || time.signal.aborted) throw new PermanentError(`tool ${decision.tool} called ctx.once under ${key} after its try had ended (it had returned or run out of time; a timer or a callback it kept): the effect would run outside the step, after its outcome was taken, and a failure of it would never be tried again; call ctx.once before the tool returns, and await it`);
    // A call that is not recorded (a tool without side effects) is asked for again after a failed try,
    // and the model's next call under the same key was refused as a reused key, failing the run then.
    if (decision.idempotencyKey === undefined) throw new PermanentError(`tool ${decision.tool} called ctx.once, but it is not sideEffect: true: its call is not recorded, so a retry asks the model again, whose next call would find the key ${key} taken; mark the tool sideEffect: true`);
    if (onceState !== 'none') throw onceAgainError(decision.tool, key, onceState);
    onceState = 'running';
    // The try's time ends the claim's renewal too: a tool that hangs inside `once` would otherwise keep
    // the key from every later try for as long as its worker lives.
    const stop = time.onceSignal(options?.signal);
    try {
      const result = await deps.ledger.once(key, decision.input, (signal) => { effectBegun = true; effectSignal = signal; return effect(signal); }, {
        ...options, signal: stop.signal,
        // The one sign an effect may have been applied twice (the tool's own onClaimLost still hears it).
        onClaimLost: () => {
          deps.log.warn(
            { event: 'effect-claim-lost', runId, step, tool: decision.tool, idempotencyKey: key, workerId: deps.workerId },
            `the effect of tool ${decision.tool} under ${key} finished after this worker lost its claim (it paused past the claim's lease, and another attempt took the key): that attempt may have applied it too, unless the effect checks the key itself; its result is kept, so no third attempt runs it`,
          );
          options?.onClaimLost?.();
        },
      });
      onceState = 'applied';
      return result;
    } catch (error) {
      onceState = 'none';
      throw error;
    } finally {
      stop.release();
    }
  };
  const context: ToolContext = {
    runId, step, attempt, idempotencyKey: key,
    once: (effect, options) => {
      const before = onceState;
      const handed = applyOnce(effect, options);
      // The promise the tool holds, so that one it left running is waited for and its failure handled.
      if (before === 'none' && onceState === 'running') running = handed;
      return handed;
    },
    get signal() { return time.signal; },
    readOutput: (ref) => readRunOutput(deps, state, ref),
  };
  /** Waits for a once the tool left running, its outcome (on record under the key) not the step's: what it was. */
  const unawaited = (): Promise<string> | undefined => {
    over = true;
    return onceState === 'running' ? running!.then(() => 'it then completed', (error: unknown) => `it then failed: ${failureText(error)}`) : undefined;
  };
  const returnedEarly = (outcome: string) => new PermanentError(`tool ${decision.tool} returned while its ctx.once under ${key} was still running (it was not awaited; ${outcome}): its output was made without the effect's outcome, and the step would be checkpointed before the effect was applied, so a failed effect would never be tried again; await it (return await ctx.once(...)). The outcome is kept under the key: a retry after the fix gets its result, or runs a failed effect again`);
  const returned = (value: unknown) => {
    const left = unawaited();
    return left ? left.then((outcome) => { throw returnedEarly(outcome); }) : value;
  };
  // A failed try whose effect still runs (a Promise.all one of whose parts failed first, a throw after an
  // unawaited once) is retried once the effect's outcome is on record: the retry then gets its result, or
  // runs it again.
  const failed = (error: unknown) => {
    const left = unawaited();
    return left ? left.then(() => { throw error; }) : Promise.reject(error);
  };
  return {
    context,
    claimLost: () => (effectSignal?.reason instanceof ClaimLostError ? effectSignal.reason : undefined),
    heldAtTimeout: async () => {
      if (onceState !== 'running' || effectBegun) return undefined;
      // The try's signal aborted the wait: the ledger answers at once (a read or a write in flight at most).
      const answer = await Promise.race([
        running!.then(() => undefined, (error: unknown) => error),
        new Promise((resolve) => setTimeout(resolve, CLAIM_ANSWER_MS).unref()),
      ]);
      return answer instanceof IdempotencyInProgressError ? answer : undefined;
    },
    run: (call) => {
      let result: unknown;
      try {
        result = call();
      } catch (error) {
        // Thrown at once, the try had not ended for ctx.once: one kept in a timer still ran its effect,
        // and one left running rejected unhandled.
        const left = unawaited();
        if (!left) throw error;
        return left.then(() => { throw error; });
      }
      return isPromiseLike(result) ? Promise.resolve(result).then(returned, failed) : returned(result);
    },
  };
}

/**
 * An output of this run by its ref. Only the run's own: a ref is a content hash, but one pasted into a
 * goal or another run's output must not read what this run never produced.
 */
async function readRunOutput(deps: EngineDeps, state: RunState, ref: string): Promise<string> {
  if (!state.steps.some((s) => s.result.ref === ref)) {
    throw new ToolError(`${JSON.stringify(ref.slice(0, 100))} is not the ref of an output of this run's steps ${(state.stepsFrom ?? 0) + 1}-${state.step}: give the ref shown after an output's excerpt ("stored as sha256:...")`);
  }
  let data: Buffer | undefined;
  try {
    data = await deps.blobs.get(ref);
  } catch (error) {
    // Lost as a missing blob is: the model is told, where the run failed on it.
    if (error instanceof DamagedBlobError) throw new ToolError(`the output ${ref} is damaged in the blob store (${error.why}); its excerpt is all that is left`);
    throw error;
  }
  if (!data) throw new ToolError(`the output ${ref} is no longer in the blob store (removed by retention); its excerpt is all that is left`);
  return data.toString('utf8');
}

/** The tool's own bug, the same on every try: its run fails at once, saying what to do instead. */
function onceAgainError(tool: string, key: string, state: 'running' | 'applied'): PermanentError {
  return new PermanentError(state === 'applied'
    ? `tool ${tool} called ctx.once again after its effect under ${key} was applied: the key keeps that effect's result, so this effect would never run; do both in one ctx.once, or give each its own tool`
    : `tool ${tool} called ctx.once while its ctx.once under ${key} was still running (inside its effect, or not awaited): a step has one idempotency key, so one effect; do both in one ctx.once, or give each its own tool`);
}

/**
 * A reply the tools cannot take becomes a step whose result is the error, so the model can correct it. A
 * long one (every issue of a large input) is stored by reference like any output, its blob written before
 * a record names it: `show --full`, the inspector and fork read the whole of it there. `uncounted`: the
 * usage to count (a recorded call's, which a failed try counted, none), as commitOutput's.
 */
async function commitErrorStep(deps: EngineDeps, state: RunState, base: Base, step: number, reply: { tool: string; input: unknown; usage?: Usage; model?: string }, message: string, uncounted: Usage | undefined): Promise<Advance> {
  // The call as the model made it, no idempotency key: nothing ran under one.
  const call: Decision = { step, tool: reply.tool, input: reply.input ?? {}, at: deps.clock.now() };
  if (reply.usage) call.usage = reply.usage;
  const model = answeringModel(deps, reply);
  if (model) call.model = model;
  const shaped = shapeResult(message, false, deps.agent.settings?.inlineLimit ?? DEFAULT_INLINE_LIMIT);
  return commitOutput(deps, base, state, call, shaped, uncounted);
}

/**
 * An unknown tool's name as its step records it: as the model gave it when a tool could have that name
 * (agent.ts's TOOL_NAME), else as a JSON string of its first 64 characters, on one line. The name is the
 * model's text, and a step's line in every later prompt, `run`'s progress line and `show` print it as it
 * is: a name with line breaks, written by a model a tool's output had talked round, put forged lines
 * (`2. request_approval ... -> ok: {"approval":"approved"...}`) into the completed steps, the list the
 * prompt calls the source of truth, for the rest of the run; and a name of megabytes was in each prompt.
 */
function unknownToolName(name: string): string {
  if (TOOL_NAME.test(name)) return name;
  // JSON escapes the C0 controls; the line and paragraph separators, C1 (NEL) and the rest it leaves as they are.
  return revealedJson(JSON.stringify(excerpt(name, 64)));
}

/**
 * The model a step's usage is priced by: the reply's, else (a model of the program's own that names none)
 * the worker's, so `status`, `retry` and the budget price the step alike, not each by its own default.
 */
function answeringModel(deps: EngineDeps, reply: { usage?: Usage; model?: string }): string | undefined {
  return reply.model ?? (reply.usage ? workerModelId(deps) : undefined);
}

/** The model this worker asks: the agent's setting (what a model adapter is told to use), else its name. */
function workerModelId(deps: EngineDeps): string {
  return deps.agent.settings?.model ?? modelIdOf(deps.model.name);
}

function asStepError(error: unknown): unknown {
  if (error instanceof PermanentError || error instanceof TransientError) return error;
  return new TransientError(errorMessage(error), { cause: error });
}

/** A failed try: recorded, and the next one waits at least as long as the failure asked (its retry-after). */
async function commitFailure(deps: EngineDeps, base: Base, state: RunState, error: unknown, extra?: { usage?: Usage; message?: string }): Promise<Advance> {
  const retryAfterMs = error instanceof TransientError ? error.retryAfterMs : undefined;
  return commit(deps, retryAfterMs === undefined ? base : { ...base, retryAfterMs }, recordFailure(state, error, deps.clock.now(), extra));
}

/** What a checkpoint is written over: the version it is fenced on, and who gives the queue work it carries. */
interface Base {
  version: number;
  queueWork: AdvanceOptions['queueWork'] | undefined;
  /** Set on a failed try's checkpoint whose error asked for a retry-after. */
  retryAfterMs?: number;
  /** The run's usage at that version, once its state is read: what the checkpoint adds is counted from it. */
  usage?: Usage;
}

async function commit(deps: EngineDeps, base: Base, next: RunState, appended?: StepRecord, blobs?: CheckpointWrite['blobs']): Promise<Advance> {
  const { version } = base;
  const queue = deps.store.carriesQueueWork ? base.queueWork?.(next, version + 1, base.retryAfterMs) : undefined;
  // The checkpoint that condenses a block writes its summary (lib/core/condensed.ts): a few hundred bytes
  // once per CONDENSE_BLOCK steps, so that no resume has to read the block's records again.
  const summaries = summariesDue(next, blockCost);
  const write: CheckpointWrite = { runId: next.runId, expectedVersion: version, state: next, workerId: deps.workerId, codeVersion: deps.codeVersion, queue };
  if (appended) write.appended = appended;
  if (summaries.length) write.summaries = summaries;
  if (blobs) write.blobs = blobs;
  const written = await deps.store.commit(write);
  if (next.status === 'running') {
    const held = heldAfter(next, summaries, next.budget?.usd !== undefined ? blockCost : undefined);
    stepCacheOf(deps.store).set(next.runId, written.head !== undefined ? withFields(held, { head: heldHead(written.head, next) }) : held);
  }
  else stepCacheOf(deps.store).delete(next.runId);
  // Both objects have their fields set, not spread from conditional objects: this runs at every step.
  const line: Record<string, unknown> = {
    event: 'checkpoint', runId: next.runId, step: next.step, version: written.version, workerId: deps.workerId, bytes: written.bytes, status: next.status,
  };
  if (appended) line.tool = appended.tool;
  if (next.failures) {
    line.failures = next.failures;
    line.error = next.lastError;
  }
  // A run that failed is an operator's to look at: a warning, which `--log pretty` shows (it hides info).
  if (next.status === 'failed') deps.log.warn(line, `run ${next.runId} failed: ${next.reason ?? ''}`);
  else deps.log.info(line, 'checkpoint written');
  if (deps.probe) await deps.probe('C6', { runId: next.runId, step: next.step });
  const advanced: Advance & { kind: 'advanced' } = { kind: 'advanced', version: written.version, state: next, bytes: written.bytes, queued: queue };
  if (appended) advanced.appended = appended;
  if (written.received) advanced.received = written.received;
  if (base.retryAfterMs !== undefined) advanced.retryAfterMs = base.retryAfterMs;
  const added = base.usage && usageAdded(next.usage, base.usage);
  if (added) advanced.added = added;
  return advanced;
}

async function markUnreadable(deps: EngineDeps, runId: string, version: number, reason: string): Promise<Advance> {
  const written = await deps.store.markUnreadable(runId, version, reason, { workerId: deps.workerId, codeVersion: deps.codeVersion });
  deps.log.error({ event: 'checkpoint', runId, step: written.step, version: written.version, workerId: deps.workerId, bytes: written.bytes, status: 'failed', reason }, 'run failed: unreadable checkpoint');
  return { kind: 'idle', version: written.version, status: 'failed', failedNow: true };
}
