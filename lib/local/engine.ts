/**
 * The engine on the SQLite file, wired as the CLI wires it (model, logger, approval emails, events), for a
 * program that embeds stepwise: `stepwise/local`'s openLocalEngine, and what `stepwise run` is built on.
 */
import { defineAgent, importedAgent, worksRunsOf, type AgentDefinition } from '../agent.ts';
import { decodeState } from '../core/codec.ts';
import { NewerFormatError, UnknownRunError, WrongAgentError } from '../core/errors.ts';
import type { RunState } from '../core/state.ts';
import { processWorkerId, type EngineDeps } from '../engine/deps.ts';
import type { Handled } from '../engine/handle-message.ts';
import { runWorker } from '../engine/worker-loop.ts';
import { chooseModel } from '../llm/choose-model.ts';
import { createLogger, withFields, type Logger } from '../log.ts';
import { systemClock, type Model } from '../ports.ts';
import { CODE_VERSION } from '../version.ts';
import { describeFullDiskStep, describeLocalRefusal } from './disk-full.ts';
import { stopsLocalWorker } from './newer-layout.ts';
import { DEFAULT_DB_PATH, expandHome } from './paths.ts';
import { openLocalRuntime, type LocalRuntime } from './runtime.ts';
import { answerApproval, type AnswerOutcome } from '../waits/answer.ts';
import { checkEvent, emitEvent } from '../waits/events.ts';
import { localWaitServices } from './wait-services.ts';

export interface LocalEngineOptions {
  /** The SQLite file (default .stepwise/stepwise.db); approval emails go to `outbox/` beside it. */
  dbPath?: string;
  /** Default: Claude when ANTHROPIC_API_KEY is set, else the agent's offlineModel(). */
  model?: Model;
  /** Names this process in checkpoints and logs (default host-pid). */
  workerId?: string;
  /** Default: JSON lines on stderr at info (STEPWISE_LOG_LEVEL, STEPWISE_LOG_FORMAT). */
  log?: Logger;
}

export interface LocalEngine {
  /** What every engine function takes: `startRun(engine.deps, { goal })`, `runWorker(engine.deps, engine.runtime.queue)`. */
  deps: EngineDeps;
  runtime: LocalRuntime;
  /** Which model runs and why, in one line (`offline scripted model ...` or `Anthropic claude-... (key from ...)`). */
  modelLabel: string;
  /**
   * Works one run in this process, a step per message, until it ends, waits or `signal` aborts; other
   * processes on the same file may share its steps. Resolves with the run as it then stands.
   */
  work(runId: string, options?: { signal?: AbortSignal; onHandled?: (handled: Handled) => void; visibilityMs?: number }): Promise<{ version: number; state: RunState }>;
  /** Answers a run's open approval, as its emailed page would (as `by`, else the wait's first approver). */
  answer(runId: string, input: { decision: 'approve' | 'reject'; by?: string; comment?: string }): Promise<AnswerOutcome>;
  /** An event for the runs waiting on its type and key (kept a while for a wait that begins soon). */
  emit(event: { type: string; key: string; payload?: unknown; id?: string }): Promise<{ eventId: string; fresh: boolean; resumed: string[] }>;
  close(): void;
}

/**
 * What a program passes as its agent: the agent, or what an ES module's default import of a CommonJS agent
 * module gives (`import agent from './agent.ts'` in a .mts file of a package `npm init` made), its exports.
 */
export type ImportedAgent = AgentDefinition | { default: AgentDefinition };

/** The engine on the embedded SQLite runtime, for a program of your own: what `stepwise run` is built on. */
export async function openLocalEngine(given: ImportedAgent, options: LocalEngineOptions = {}): Promise<LocalEngine> {
  // Checked as `stepwise run` checks a loaded one: an agent built without defineAgent (a tool without
  // sideEffect, a misspelt budget) would otherwise fail its runs one step at a time, or not at all. One
  // imported from a CommonJS package arrives as its module's exports, which loadAgent unwraps too: taken
  // as it came, it was refused as "an agent needs a name".
  const agent = defineAgent(importedAgent(given) as AgentDefinition);
  const { model, label } = options.model ? { model: options.model, label: `model "${options.model.name}" given by the program` } : await chooseModel(agent);
  const dbPath = expandHome(options.dbPath ?? DEFAULT_DB_PATH);
  const workerId = options.workerId ?? processWorkerId();
  // Every line names the worker (as the CLI's worker does), unless the program gave a logger of its own.
  const log = options.log ?? withFields(createLogger({ agent: agent.name }), { workerId });
  const runtime = openLocalRuntime({ dbPath, log });
  const deps: EngineDeps = {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
    model, agent, clock: systemClock, workerId, codeVersion: CODE_VERSION,
    log, waits: localWaitServices(runtime, dbPath),
  };
  return {
    deps, runtime, modelLabel: label,
    work: (runId, workOptions = {}) => workRun(deps, runtime, runId, workOptions),
    answer: (runId, input) => answerApproval(deps, runId, input),
    emit: async (input) => {
      const result = await emitEvent({ ...deps, events: runtime.events, waitingFor: (t, k) => runtime.store.waitingFor(t, k) }, checkEvent(input));
      return { eventId: result.event.id, fresh: result.fresh, resumed: result.resumed.filter((r) => r.outcome === 'resumed').map((r) => r.runId) };
    },
    close: () => runtime.close(),
  };
}

async function workRun(
  deps: EngineDeps, runtime: LocalRuntime, runId: string,
  options: { signal?: AbortSignal; onHandled?: (handled: Handled) => void; visibilityMs?: number },
): Promise<{ version: number; state: RunState }> {
  await checkWorkable(deps, runtime, runId);
  // A round of the worker loop ends when the run stops running; a fresh one is made if it runs again.
  let round = new AbortController();
  const onAbort = () => round.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  // Another worker may finish the run, or answer its last step: watch the store so this never waits forever.
  const watch = setInterval(() => {
    const current = round;
    void runtime.store.load(runId).then((s) => { if (!s || s.status !== 'running') current.abort(); }, () => undefined);
  }, 500);
  try {
    for (;;) {
      if (options.signal?.aborted) round.abort();
      await runWorker(deps, runtime.queue.forRun(runId), {
        // A step the file's lock or a full disk refused is said as that, and a receive a full disk refused
        // is polled through, as the CLI's worker does.
        signal: round.signal, waitMs: 250, stopOn: stopsLocalWorker, refusal: describeLocalRefusal, receiveRefusal: describeFullDiskStep,
        ...(options.visibilityMs ? { visibilityMs: options.visibilityMs } : {}),
        onHandled: (handled) => {
          options.onHandled?.(handled);
          return handled.action === 'ack' && handled.outcome?.kind === 'advanced' && handled.outcome.state.status !== 'running';
        },
      });
      const stored = await runtime.store.load(runId);
      if (!stored) throw new UnknownRunError(runId);
      // A wait can end as it begins (an event kept from before it): the run is running again with its
      // next step queued, and this keeps working it rather than return with the run half done.
      if (stored.status !== 'running' || options.signal?.aborted) return { version: stored.version, state: decodeState(stored) };
      round = new AbortController();
    }
  } finally {
    clearInterval(watch);
    options.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * Refuses a run this engine can never step, where the loop would wait for good: its messages are handed
 * back for another agent's worker or newer code, and only this process is working the run. A head that
 * cannot be read is left to the worker, which fails the run with the reason.
 */
async function checkWorkable(deps: EngineDeps, runtime: LocalRuntime, runId: string): Promise<void> {
  const stored = await runtime.store.load(runId, { recent: true });
  if (!stored) throw new UnknownRunError(runId);
  let agent: string;
  try {
    agent = decodeState(stored).agent;
  } catch (error) {
    if (error instanceof NewerFormatError) throw error;
    return;
  }
  if (!worksRunsOf(deps.agent, agent)) throw new WrongAgentError(runId, agent, deps.agent.name);
}
