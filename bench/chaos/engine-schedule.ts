/**
 * One seeded fault schedule over the engine and the SQLite runtime, in this process: several worker
 * "processes" (each its own connections, worker id and clock on one time line) on one database file,
 * several runs, and faults drawn from the seed: a crash at any of C1-C8 or inside a `ctx.once` effect
 * (the process is dead from then on and a fresh one starts), a worker that freezes inside an effect past
 * its lease and visibility timeout and comes back after another took over, an effect that outlives the
 * visibility timeout while its holder lives, a store brownout, duplicate deliveries, lost acks, delayed
 * deliveries, transient and permanent model faults. Time is a ManualClock: leases and timeouts pass at once.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition, type ToolContext } from '../../lib/agent.ts';
import { PermanentError, TransientError } from '../../lib/core/errors.ts';
import { promptText } from '../../lib/core/prompt.ts';
import { isTerminal } from '../../lib/core/state.ts';
import type { CrashPoint, EngineDeps } from '../../lib/engine/deps.ts';
import { handleDelivery, retryDelayMs, type Handled } from '../../lib/engine/handle-message.ts';
import { startRun } from '../../lib/engine/start.ts';
import { silentLogger } from '../../lib/log.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import type { CheckpointWrite, Delivery, Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { ManualClock } from '../../test/support/manual-clock.ts';
import { completedSteps } from '../../test/support/stub-model.ts';
import { Brownout, ProcessDied, faulty } from './faulty.ts';
import { checkInvariants, type RunExpectation, type Verdict, type Violation } from './invariants.ts';
import { rng, type Rng } from './random.ts';

const VISIBILITY_MS = 30_000;
const MAX_TURNS = 3_000;
const CRASH_POINTS: CrashPoint[] = ['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8'];
export const PERMANENT_FAULT = 'injected permanent fault: 400 invalid_request_error';
const TRANSIENT_FAULTS = ['429 rate_limit_error, retry-after 1', '529 overloaded_error', '500 api_error', 'connection dropped', 'reply timed out'];

/** A schedule's faults and what the invariant checker found after it. */
export interface ScheduleReport extends Omit<Verdict, 'reasons'> {
  seed: number;
  runs: number;
  steps: number;
  crashes: number;
  crashesByPoint: Record<string, number>;
  duplicates: number;
  delayed: number;
  brownouts: number;
  slowWorkers: number;
  longEffects: number;
  modelFaults: number;
  modelCalls: number;
  /** Errors the driver saw that no injected fault explains (a bug, if any). */
  unexpected: string[];
}

interface Deferred<T> { promise: Promise<T>; resolve(value: T): void }
function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => { resolve = r; });
  return { promise, resolve };
}

class SimulatedCrash extends Error {
  constructor(readonly point: string, readonly step: number) { super(`simulated crash at ${point} (step ${step})`); }
}

interface Proc {
  id: string;
  clock: ManualClock;
  runtime: LocalRuntime;
  deps: EngineDeps;
  dead: boolean;
  died: Deferred<'died'>;
}

type Park = { mode: 'freeze' | 'long'; proc: Proc; go: Deferred<void> };

/** The step's tool: odd steps an exact effect (key stored with it), even steps a ledger-only one. */
export const toolOf = (step: number): string => (step % 2 === 1 ? 'write_row' : 'notify');

/**
 * A defect planted on purpose, to show that the schedules and the checker find one: a ledger that
 * forgets (runs every effect each time it is asked), a queue that loses one send in ten, or a checkpoint
 * commit that drops the send it carries one time in ten (the one-transaction path).
 */
export type Sabotage = 'ledger-forgets' | 'sends-lost' | 'commit-drops-sends';

export async function engineSchedule(seed: number, options: { intensity?: number; sabotage?: Sabotage } = {}): Promise<ScheduleReport> {
  const r = rng(seed);
  const k = options.intensity ?? 1;
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-chaos-'));
  const dbPath = join(dir, 'stepwise.db');
  const root = new ManualClock();
  const report: ScheduleReport = {
    seed, runs: 0, steps: 0, crashes: 0, crashesByPoint: {}, duplicates: 0, delayed: 0, brownouts: 0, slowWorkers: 0, longEffects: 0,
    modelFaults: 0, modelCalls: 0, completed: 0, failed: 0, completedSteps: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, violations: [], unexpected: [],
  };

  // The runs and their faults.
  const runs: RunExpectation[] = Array.from({ length: r.int(2, 4) }, (_, i) => ({ runId: `run-${i}`, steps: r.int(3, 8), toolOf }));
  const stepsOf = new Map(runs.map((run) => [run.runId, run.steps]));
  const doomed = r.chance(0.2) ? { runId: r.pick(runs).runId, step: 0 } : undefined;
  if (doomed) doomed.step = r.int(1, stepsOf.get(doomed.runId)!);
  report.runs = runs.length;
  report.steps = runs.reduce((n, run) => n + run.steps, 0);

  // What really happened outside: applications per idempotency key, and the keys the exact effect stored.
  const applied = new Map<string, number>();
  const storedKeys = new Set<string>();
  const bump = (key: string) => applied.set(key, (applied.get(key) ?? 0) + 1);

  let brownoutCalls = 0;
  let parked: Park | undefined;
  let parkSignal = deferred<'parked'>();
  let allowPark = true;
  const maxCrashes = r.int(0, Math.round(6 * k));

  const die = (proc: Proc) => {
    proc.dead = true;
    proc.clock.kill();
    proc.died.resolve('died');
  };

  /** Inside an effect, after it claimed its key: maybe die here, freeze here, or run long. */
  const inside = async (proc: Proc, ctx: ToolContext, where: 'before' | 'after'): Promise<void> => {
    if (proc.dead) throw new ProcessDied(proc.id);
    if (report.crashes < maxCrashes && r.chance(0.04 * k)) {
      report.crashes++;
      report.crashesByPoint[`once-${where}`] = (report.crashesByPoint[`once-${where}`] ?? 0) + 1;
      die(proc);
      return new Promise<void>(() => {}); // a killed process never gets past this point
    }
    if (allowPark && !parked && r.chance(0.05 * k)) {
      const mode = r.chance(0.5) ? 'freeze' : 'long';
      const park: Park = { mode, proc, go: deferred() };
      parked = park;
      if (mode === 'freeze') { report.slowWorkers++; proc.clock.freeze(); } else report.longEffects++;
      parkSignal.resolve('parked');
      await park.go.promise;
    }
    void ctx;
  };

  const agentFor = (proc: Proc): AgentDefinition => defineAgent({
    name: 'chaos',
    tools: [
      tool({
        name: 'write_row', description: 'Write one row; the key is stored with it.', input: z.object({ n: z.number().int().positive() }), sideEffect: true,
        run: (input, ctx) => ctx.once(async () => {
          await inside(proc, ctx, 'before');
          // The effect and its key commit together (one synchronous block here, a transaction in a database).
          if (!storedKeys.has(ctx.idempotencyKey)) { storedKeys.add(ctx.idempotencyKey); bump(ctx.idempotencyKey); }
          await inside(proc, ctx, 'after');
          // Every third step's output goes to the blob store, so those steps pass C5 too.
          return input.n % 3 === 0 ? { n: input.n, log: 'x'.repeat(5_000) } : { n: input.n };
        }),
      }),
      tool({
        name: 'notify', description: 'Send one notice; only the ledger keeps it once.', input: z.object({ n: z.number().int().positive() }), sideEffect: true,
        run: (input, ctx) => ctx.once(async (signal) => {
          // Only before the effect: a crash or freeze after a ledger-only effect is the case README says
          // nothing can tell apart (store the key with the effect).
          await inside(proc, ctx, 'before');
          if (signal.aborted) throw new TransientError('claim lost while frozen');
          bump(ctx.idempotencyKey);
          return { sent: input.n };
        }),
      }),
    ],
  });

  const model: Model = {
    name: 'chaos',
    async decide(request: ModelRequest): Promise<ModelReply> {
      report.modelCalls++;
      const next = completedSteps(promptText(request.prompt)) + 1;
      if (doomed && request.runId === doomed.runId && next === doomed.step) throw new PermanentError(PERMANENT_FAULT);
      if (r.chance(0.06 * k)) { report.modelFaults++; throw new TransientError(`injected ${r.pick(TRANSIENT_FAULTS)}`); }
      if (r.chance(0.02 * k)) { report.modelFaults++; return { kind: 'invalid', reason: 'injected: two tool calls in one reply' }; }
      return next <= stepsOf.get(request.runId)!
        ? { kind: 'tool', tool: toolOf(next), input: { n: next }, usage: { inputTokens: 100, outputTokens: 20, cacheWriteTokens: 0, cacheReadTokens: 0 } }
        : { kind: 'done', summary: `did ${next - 1} steps` };
    },
  };

  let spawned = 0;
  const procs: Proc[] = [];
  const spawn = (): Proc => {
    const id = `w${spawned++}`;
    const clock = root.process();
    const runtime = openLocalRuntime({ dbPath, clock });
    const proc = { id, clock, runtime, dead: false, died: deferred<'died'>() } as Proc;
    const faults = {
      check: () => {
        if (proc.dead) throw new ProcessDied(id);
        if (brownoutCalls > 0) { brownoutCalls--; throw new Brownout(); }
      },
    };
    const ledger = options.sabotage === 'ledger-forgets'
      ? { once: <T>(_key: string, _args: unknown, effect: (signal: AbortSignal) => Promise<T>) => effect(new AbortController().signal) }
      : runtime.ledger;
    const queue = options.sabotage === 'sends-lost'
      ? Object.assign(Object.create(runtime.queue) as typeof runtime.queue, {
        send: (message: Parameters<typeof runtime.queue.send>[0], o?: Parameters<typeof runtime.queue.send>[1]) => (r.chance(0.1) ? Promise.resolve() : runtime.queue.send(message, o)),
      })
      : runtime.queue;
    // A queue that loses sends cannot share the checkpoint's transaction: that sabotage runs on a store
    // that leaves the send and the ack to the queue, as on AWS.
    const store = options.sabotage === 'sends-lost' ? new SqliteCheckpointStore(runtime.db, { clock })
      : options.sabotage === 'commit-drops-sends' ? Object.assign(Object.create(runtime.store) as typeof runtime.store, {
        commit: (write: CheckpointWrite) => {
          if (!write.queue?.send || !r.chance(0.1)) return runtime.store.commit(write);
          const { send: _dropped, ...rest } = write.queue;
          return runtime.store.commit({ ...write, queue: rest });
        },
      })
      : runtime.store;
    proc.deps = {
      store: faulty(store, faults), blobs: faulty(runtime.blobs, faults), ledger: faulty(ledger, faults),
      queue: faulty(queue, faults), model, agent: agentFor(proc), clock, workerId: id, codeVersion: 'chaos', log: silentLogger,
      probe: (point: CrashPoint, at: { step: number }) => {
        if (proc.dead) throw new ProcessDied(id);
        if (report.crashes < maxCrashes && r.chance(0.03 * k)) {
          report.crashes++;
          report.crashesByPoint[point] = (report.crashesByPoint[point] ?? 0) + 1;
          die(proc);
          throw new SimulatedCrash(point, at.step);
        }
      },
    };
    procs.push(proc);
    return proc;
  };
  const restart = (proc: Proc) => {
    procs.splice(procs.indexOf(proc), 1);
    try { proc.runtime.close(); } catch { /* already closed */ }
    spawn();
  };

  type Outcome = { kind: 'handled'; handled: Handled } | { kind: 'error'; error: unknown } | { kind: 'died' } | { kind: 'parked' };
  const handle = async (proc: Proc, delivery: Pick<Delivery, 'body' | 'receiveCount'> & { receipt?: string }): Promise<{ outcome: Outcome; pending: Promise<Outcome> }> => {
    parkSignal = deferred<'parked'>();
    const pending: Promise<Outcome> = handleDelivery(proc.deps, delivery).then(
      (handled) => ({ kind: 'handled' as const, handled }),
      (error: unknown) => ({ kind: 'error' as const, error }),
    );
    const outcome = await Promise.race([
      pending, proc.died.promise.then(() => ({ kind: 'died' as const })), parkSignal.promise.then(() => ({ kind: 'parked' as const })),
    ]);
    return { outcome, pending };
  };

  /** What a worker loop does with the outcome of a delivery; a dead process does nothing more. */
  const settle = async (proc: Proc, delivery: Delivery, outcome: Outcome): Promise<void> => {
    if (outcome.kind === 'died' || proc.dead) { restart(proc); return; }
    if (outcome.kind === 'error') {
      if (!(outcome.error instanceof Brownout)) report.unexpected.push(`${proc.id}: ${String(outcome.error)}`);
      await proc.runtime.queue.release(delivery, retryDelayMs(Math.min(delivery.receiveCount, 6)));
      return;
    }
    if (outcome.kind !== 'handled') return;
    const { handled } = outcome;
    if (handled.action === 'release') {
      const extra = r.chance(0.2) ? r.int(1, 20_000) : 0;
      if (extra) report.delayed++;
      await proc.runtime.queue.release(delivery, handled.delayMs + extra);
      return;
    }
    if (handled.acked) return; // the step's own transaction acked it: there is no separate ack to lose
    if (r.chance(0.08)) { report.duplicates++; await proc.runtime.queue.release(delivery, 0); return; } // the ack was lost
    await proc.runtime.queue.ack(delivery);
  };

  try {
    for (let i = 0, n = r.int(2, 3); i < n; i++) spawn();
    for (const run of runs) await startRun(procs[0]!.deps, { goal: `do ${run.steps} steps`, runId: run.runId });
    const reader = openLocalRuntime({ dbPath, clock: root });
    const allEnded = async () => {
      for (const run of runs) if (!isTerminal((await reader.store.load(run.runId))!.status)) return false;
      return true;
    };

    let parkedWork: { delivery: Delivery; pending: Promise<Outcome>; turnsLeft: number } | undefined;
    let turn = 0;
    for (; turn < MAX_TURNS; turn++) {
      if (parked && parkedWork && --parkedWork.turnsLeft <= 0) {
        const { proc } = parked;
        if (parked.mode === 'freeze') await proc.clock.thaw();
        parked.go.resolve();
        const work = parkedWork;
        parked = undefined; parkedWork = undefined;
        allowPark = false;
        const outcome = await Promise.race([work.pending, proc.died.promise.then(() => ({ kind: 'died' as const }))]);
        allowPark = true;
        await settle(proc, work.delivery, outcome);
        continue;
      }
      if (!parked && reader.queue.depth() === 0) break;
      if (brownoutCalls === 0 && r.chance(0.02 * k)) { report.brownouts++; brownoutCalls = r.int(1, 8); }

      const candidates = procs.filter((p) => !p.dead && p !== parked?.proc);
      const proc = r.pick(candidates);
      const [delivery] = await proc.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      if (!delivery) {
        await root.pass(r.chance(0.5) ? VISIBILITY_MS + 1 : r.int(1_000, 65_000));
        continue;
      }
      const { outcome, pending } = await handle(proc, delivery);
      if (outcome.kind === 'parked') {
        parkedWork = { delivery, pending, turnsLeft: r.int(1, 10) };
        // Another worker may take the message (and, past the lease, the key) while this one is away.
        await root.pass(r.chance(0.5) ? VISIBILITY_MS + 1 : 61_000 + VISIBILITY_MS);
        continue;
      }
      // A duplicate delivery of the same body, handled at once by another worker.
      if (outcome.kind === 'handled' && r.chance(0.08)) {
        report.duplicates++;
        const other = r.pick(procs.filter((p) => !p.dead && p !== parked?.proc));
        allowPark = false;
        const dup = await handle(other, { body: delivery.body, receiveCount: delivery.receiveCount + 1 });
        allowPark = true;
        if (dup.outcome.kind === 'died') restart(other);
        else if (dup.outcome.kind === 'error' && !(dup.outcome.error instanceof Brownout)) report.unexpected.push(`${other.id} (duplicate): ${String(dup.outcome.error)}`);
      }
      await settle(proc, delivery, outcome);
    }
    if (turn >= MAX_TURNS) report.unexpected.push(`schedule did not settle within ${MAX_TURNS} turns`);
    if (!(await allEnded()) && reader.queue.depth() === 0) { /* left for the invariants: stuck */ }

    const verdict = await checkInvariants({
      store: reader.store, runs, applied,
      injected: (reason) => reason.includes('injected') || /started \d+ times without finishing/.test(reason),
    });
    Object.assign(report, {
      completed: verdict.completed, failed: verdict.failed, completedSteps: verdict.completedSteps,
      appliedTwice: verdict.appliedTwice, stepsLost: verdict.stepsLost, stuck: verdict.stuck, violations: verdict.violations,
    });
    reader.close();
  } finally {
    for (const proc of procs) { try { proc.runtime.close(); } catch { /* closed */ } }
    rmSync(dir, { recursive: true, force: true });
  }
  return report;
}

export type { Rng };
