/**
 * One seeded fault schedule over the engine and the SQLite runtime, in this process: several worker
 * "processes" (each its own connections, worker id and clock on one time line) on one database file,
 * several runs, and faults drawn from the seed: a crash at any of C1-C8 or inside a `ctx.once` effect
 * (the process is dead from then on and a fresh one starts), a worker that freezes inside an effect past
 * its lease and visibility timeout and comes back after another took over, an effect that outlives the
 * visibility timeout while its holder lives, a store brownout, duplicate deliveries, lost acks, delayed
 * deliveries, and model faults from the local Messages API server through the real Anthropic adapter (429
 * bursts with retry-after, 529, 500, connections dropped before or in the middle of a reply, replies slower
 * than the client's timeout, unusable replies, one permanent 400). The server's replies are the agents'
 * decisions. Some runs wait once (an approval, an event or a sleep), answered once, twice, late or never;
 * some make a call a person approves first (a gated tool), approved or rejected, once, twice, late or never.
 * In one schedule of ten (`hangs`) one effect never returns, before or after it is applied, while its
 * process lives: the try ends at the tool's timeoutMs (HUNG_TOOL_TIMEOUT_MS) and its claim stays until
 * its lease ends; that schedule parks no worker (bench/chaos/hangs.ts). Time is a ManualClock: leases,
 * timeouts and wait deadlines pass at once; only a tool's time limit is real time, as the engine keeps it
 * (lib/engine/tool-time.ts). The clock has a machine's monotonic time, as the system clock has on Linux,
 * so the ledger's claims are held on it as a real worker's are, and the machine's wall clock steps now
 * and then (NTP, `date -s`, a VM restored): forward past the visibility timeout and the leases, most often
 * while a worker is inside an effect, or back, by up to two hours, for every process at once.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { SqliteLedger } from '../../lib/local/sqlite-ledger.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition, type ToolContext } from '../../lib/agent.ts';
import { ClaimLostError, TransientError } from '../../lib/core/errors.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { isTerminal } from '../../lib/core/state.ts';
import type { CrashPoint, EngineDeps } from '../../lib/engine/deps.ts';
import { handleDelivery, retryDelayMs, type Handled } from '../../lib/engine/handle-message.ts';
import { startRun } from '../../lib/engine/start.ts';
import { silentLogger } from '../../lib/log.ts';
import { openLocalRuntime, type LocalRuntime } from '../../lib/local/runtime.ts';
import { SqliteCheckpointStore } from '../../lib/local/sqlite-checkpoint-store.ts';
import type { CheckpointWrite, Delivery } from '../../lib/ports.ts';
import { answerWait, type AnswerDeps, type AnswerOutcome } from '../../lib/waits/answer.ts';
import { emitEvent } from '../../lib/waits/events.ts';
import { sendDueTimers } from '../../lib/waits/timers.ts';
import { requestApproval, sleepUntil, waitForEvent } from '../../lib/waits/tools.ts';
import { ManualClock } from '../../test/support/manual-clock.ts';
import { apiError, done, toolUse, type Reply } from '../../test/support/messages-server.ts';
import { completedSteps } from '../../test/support/stub-model.ts';
import { deferred, type Deferred } from './deferred.ts';
import { MODEL_OUTAGE_FAILURE, PERMANENT_FAULT, modelFaultScript } from './model-faults.ts';
import { Brownout, ProcessDied, faulty } from './faulty.ts';
import { checkInvariants, waitTimedOut, type RunExpectation, type Verdict, type Violation } from './invariants.ts';
import { goalOf, registerSchedule, runOf } from './model-server.ts';
import { rng, type Rng } from './random.ts';
import { HUNG_TOOL, hangPlan } from './hangs.ts';

const VISIBILITY_MS = 30_000;
/** The furthest the wall clock steps, either way. */
const CLOCK_STEP_MS = 2 * 3_600_000;
const MAX_TURNS = 3_000;
const CRASH_POINTS: CrashPoint[] = ['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8'];
export { PERMANENT_FAULT } from './model-faults.ts';
/** What the adapter says of a drop or a timeout that outlasted the SDK's retries: only injected ones reach a local server. */
export const ADAPTER_FAULT = /cannot reach the Anthropic API|did not answer in time|the model call failed|tool calls in one reply/;

export const APPROVER = 'approver@example.com';
/** An approval's and an event wait's timeout, and the longest sleep. */
const WAIT_MS = 600_000;
/** Timers further out than this are not put on the queue; the sweeper sends them when due (as on SQS). */
const MAX_TIMER_MS = 300_000;
const TIMER_LOOKAHEAD_MS = 60_000;
const EVENT_TYPE = 'chaos.go';

/**
 * How a schedule answers a run's wait. A sleep is never answered: its deadline wakes it. A gate is a call
 * of a tool with `approval`: its first answer is `verdict`; approved, the engine runs the call at the next
 * step, so the model makes it with that step's n.
 */
export type WaitPlan = {
  step: number; kind: 'approval' | 'event' | 'sleep' | 'gate'; answer: 'once' | 'twice' | 'late' | 'never'; sleepSeconds: number; verdict?: 'approved' | 'rejected';
};

/** The figures of waits and model faults; optional, so a schedule without them (real processes) reports none. */
export interface WaitFigures {
  /** Waits that began. */
  waits: number;
  /** Of those, calls of a tool a person approves first: approved, and how many of those the engine ran. */
  gates: number;
  gatesApproved: number;
  gatedRuns: number;
  answeredTwice: number;
  answeredLate: number;
  neverAnswered: number;
  timedOut: number;
  waitsTwice: number;
  modelFaultsByKind: Record<string, number>;
}

/** A schedule's faults and what the invariant checker found after it. */
export interface ScheduleReport extends Omit<Verdict, 'reasons' | 'timedOut' | 'waitsTwice'>, Partial<WaitFigures> {
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
  /** Next deliveries a step's checkpoint received for its worker (the local runtime), and those handed back unstarted. */
  received?: number;
  handedBack?: number;
  /** Writes the run's version refused because their worker was stale (real worker processes back from a pause). */
  staleWrites?: number;
  /** Real worker processes started to run several steps at once (`stepwise worker --concurrency`, 2 or 3). */
  concurrentWorkers?: number;
  /** Tools that never returned, in real worker processes: their try ended at the tool's timeoutMs. */
  hungTools?: number;
  /** Steps of the machine's wall clock, forward or back. */
  clockSteps?: number;
  /** Real worker processes' warnings of a step back they found in the file (clock-step.ts). */
  clockStepsSeen?: number;
  /** Real worker processes' ledger-only effects (process-agent.ts): keys applied, and applied again after their holder was killed, frozen or cut off once it had acted (ledger-only.ts). */
  ledgerOnlyEffects?: number;
  appliedAgainAfterFault?: number;
  /** Errors the driver saw that no injected fault explains (a bug, if any). */
  unexpected: string[];
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
  /** The delivery this worker's last step received in its checkpoint transaction, not started yet. */
  held?: Delivery;
  /** An injected fault that stopped its renewals (a freeze, a refused call): a claim it gave up is explained. */
  renewalsStopped?: string;
}

type Park = { mode: 'freeze' | 'long'; proc: Proc; go: Deferred<void> };

/**
 * A claim its holder gave up, no renewal confirmed: the engine steps away as from a crash, explained where a
 * freeze or a refused call stopped this worker's renewals.
 */
function givenUp(proc: Proc, error: unknown): boolean {
  return proc.renewalsStopped !== undefined && error instanceof ClaimLostError && !error.taken;
}

/** The step's tool: odd steps an exact effect (key stored with it), even steps a ledger-only one. */
export const toolOf = (step: number): string => (step % 2 === 1 ? 'write_row' : 'notify');

const WAIT_TOOL = { approval: 'request_approval', event: 'wait_for_event', sleep: 'sleep_until', gate: 'gated_row' } as const;

function waitInput(plan: WaitPlan, key: string, runId: string): unknown {
  switch (plan.kind) {
    case 'approval': return { request: `step ${plan.step} of ${runId}: go on?` };
    case 'event': return { type: EVENT_TYPE, key: `${key}-${runId}`, timeoutSeconds: WAIT_MS / 1000 };
    case 'sleep': return { seconds: plan.sleepSeconds };
    case 'gate': return { n: plan.step + 1 };
  }
}

/**
 * A defect planted on purpose, to show that the schedules and the checker find one: a ledger that
 * forgets (runs every effect each time it is asked), a queue that loses one send in ten, a checkpoint
 * commit that drops the send it carries one time in ten (the one-transaction path), a sweeper that
 * never sends the timers of long waits, a gated tool whose approval was left off (its call runs unasked),
 * or a ledger that times its leases by the wall clock (a step forward frees a live holder's key).
 */
export type Sabotage = 'ledger-forgets' | 'sends-lost' | 'commit-drops-sends' | 'timers-lost' | 'gate-left-off' | 'ledger-on-wall-clock';

export async function engineSchedule(
  seed: number, options: { intensity?: number; sabotage?: Sabotage; /** The chance that a schedule hangs one tool (default 0.1). */ hangs?: number } = {},
): Promise<ScheduleReport> {
  const r = rng(seed);
  const hang = hangPlan(seed, options.hangs);
  const k = options.intensity ?? 1;
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-chaos-'));
  const dbPath = join(dir, 'stepwise.db');
  const root = new ManualClock().onMachine();
  const report: ScheduleReport = {
    seed, runs: 0, steps: 0, crashes: 0, crashesByPoint: {}, duplicates: 0, delayed: 0, brownouts: 0, slowWorkers: 0, longEffects: 0,
    modelFaults: 0, modelCalls: 0, completed: 0, failed: 0, completedSteps: 0, blobsChecked: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, violations: [], unexpected: [],
    waits: 0, gates: 0, gatesApproved: 0, gatedRuns: 0, answeredTwice: 0, answeredLate: 0, neverAnswered: 0, timedOut: 0, waitsTwice: 0, modelFaultsByKind: {}, hungTools: 0,
    clockSteps: 0,
  };
  // The clock's steps come from a stream of their own, so the faults a seed drew before them are drawn alike.
  const stepper = rng(seed ^ 0x3c6ef372);
  const maxClockSteps = stepper.int(0, Math.round(3 * k));

  // The runs, their waits and their faults. Whether an approval is a gate comes from a stream of its own,
  // so the schedules of seeds from before gates draw everything else as they did.
  const gates = rng(seed ^ 0x6a7e5);
  const plans = new Map<string, WaitPlan>();
  const runs: RunExpectation[] = Array.from({ length: r.int(2, 4) }, (_, i) => {
    const runId = `run-${i}`;
    const steps = r.int(3, 8);
    if (!r.chance(0.6)) return { runId, steps, toolOf };
    const kind = r.pick(['approval', 'event', 'sleep'] as const);
    const plan: WaitPlan = {
      step: r.int(1, steps), kind, answer: kind === 'sleep' ? 'never' : r.pick(['once', 'twice', 'late', 'never'] as const), sleepSeconds: r.int(60, WAIT_MS / 1000),
    };
    if (kind === 'approval' && gates.chance(0.5)) {
      // Approved, the call runs at the step after the gate: both within the run's steps.
      Object.assign(plan, { kind: 'gate', step: Math.min(plan.step, steps - 1), verdict: gates.chance(0.7) ? 'approved' : 'rejected' });
    }
    plans.set(runId, plan);
    const gated = plan.kind === 'gate' && plan.verdict === 'approved';
    return { runId, steps, toolOf: (n: number) => (n === plan.step || (gated && n === plan.step + 1) ? WAIT_TOOL[plan.kind] : toolOf(n)) };
  });
  const stepsOf = new Map(runs.map((run) => [run.runId, run.steps]));
  const doomed = r.chance(0.2) ? { runId: r.pick(runs).runId, step: 0 } : undefined;
  if (doomed) doomed.step = r.int(1, stepsOf.get(doomed.runId)!);
  report.runs = runs.length;
  report.steps = runs.reduce((n, run) => n + run.steps, 0);

  // What really happened outside: applications per idempotency key, and the keys the exact effect stored.
  const applied = new Map<string, number>();
  const storedKeys = new Set<string>();
  /** The effects of the gated tool, by key: each must follow an approval of its call. */
  const gatedApplied = new Map<string, string>();
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

  /** Inside an effect, after it claimed its key: maybe die here, hang here, freeze here, or run long. */
  const inside = async (proc: Proc, ctx: ToolContext, where: 'before' | 'after'): Promise<void> => {
    if (proc.dead) throw new ProcessDied(proc.id);
    if (report.crashes < maxCrashes && r.chance(0.04 * k)) {
      report.crashes++;
      report.crashesByPoint[`once-${where}`] = (report.crashesByPoint[`once-${where}`] ?? 0) + 1;
      die(proc);
      return new Promise<void>(() => {}); // a killed process never gets past this point
    }
    if (hang.hangHere()) {
      // The process lives on; this effect never returns. Its try fails at the tool's timeoutMs.
      report.hungTools!++;
      return new Promise<void>(() => {});
    }
    if (allowPark && !parked && r.chance(0.05 * k) && !hang.hangs) {
      const mode = r.chance(0.5) ? 'freeze' : 'long';
      const park: Park = { mode, proc, go: deferred() };
      parked = park;
      if (mode === 'freeze') { report.slowWorkers++; proc.clock.freeze(); proc.renewalsStopped = 'a freeze'; } else report.longEffects++;
      parkSignal.resolve('parked');
      await park.go.promise;
    }
    void ctx;
  };

  /**
   * After a ledger-only effect, only a live holder waiting long for its reply (a crash, a freeze or a hang
   * there is the case README says nothing can tell apart): its renewals alone keep the key from a second
   * attempt, whatever the wall clock does meanwhile. Drawn from the clock's stream, so the seeds' other
   * faults stay as they were.
   */
  const afterLedgerOnly = async (proc: Proc): Promise<void> => {
    if (proc.dead) throw new ProcessDied(proc.id);
    if (!allowPark || parked || hang.hangs || !stepper.chance(0.05 * k)) return;
    const park: Park = { mode: 'long', proc, go: deferred() };
    parked = park;
    report.longEffects++;
    parkSignal.resolve('parked');
    await park.go.promise;
  };

  const agentFor = (proc: Proc): AgentDefinition => defineAgent({
    name: 'chaos',
    tools: [
      tool({
        name: 'write_row', description: 'Write one row; the key is stored with it.', input: z.object({ n: z.number().int().positive() }), sideEffect: true,
        ...hang.toolTime,
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
        ...hang.toolTime,
        run: (input, ctx) => ctx.once(async (signal) => {
          // Only before the effect: a crash or freeze after a ledger-only effect is the case README says
          // nothing can tell apart (store the key with the effect).
          await inside(proc, ctx, 'before');
          // The injected freeze's doing: a run whose tries end so often enough fails for a fault injected.
          if (signal.aborted) throw new TransientError('claim lost while frozen (an injected freeze)');
          bump(ctx.idempotencyKey);
          await afterLedgerOnly(proc);
          return { sent: input.n };
        }),
      }),
      tool({
        name: 'gated_row', description: 'Write one row a person approves first; the key is stored with it.', input: z.object({ n: z.number().int().positive() }), sideEffect: true,
        ...(options.sabotage === 'gate-left-off' ? {} : { approval: { approvers: [APPROVER], timeoutMs: WAIT_MS } }),
        ...hang.toolTime,
        run: (input, ctx) => ctx.once(async () => {
          await inside(proc, ctx, 'before');
          if (!storedKeys.has(ctx.idempotencyKey)) { storedKeys.add(ctx.idempotencyKey); bump(ctx.idempotencyKey); gatedApplied.set(ctx.idempotencyKey, 'gated_row'); }
          await inside(proc, ctx, 'after');
          return { n: input.n, approved: true };
        }),
      }),
      requestApproval({ approvers: [APPROVER], timeoutMs: WAIT_MS }),
      waitForEvent({ types: [EVENT_TYPE], maxTimeoutMs: WAIT_MS }),
      sleepUntil({ maxMs: WAIT_MS }),
    ],
  });

  // The model: the Messages API server's replies, scripted from each request's prompt as a model would
  // decide, with faults drawn from the seed. A 429 burst goes on for the next requests of the same run.
  // Drawn from a stream of their own: should a request the seed did not plan reach the server, only the
  // model faults after it shift, not the crashes and deliveries.
  const fault = (kind: string) => { report.modelFaults++; report.modelFaultsByKind![kind] = (report.modelFaultsByKind![kind] ?? 0) + 1; };
  const faultScript = modelFaultScript(seed, fault, k);
  const schedule = await registerSchedule((request): Reply => {
    report.modelCalls++;
    const runId = runOf(request) ?? '';
    const steps = stepsOf.get(runId);
    if (steps === undefined) return apiError(400, `chaos: no run ${runId}`);
    const prompt = request.userText;
    const next = completedSteps(prompt) + 1;
    const plan = plans.get(runId);
    const decision = (): Reply => {
      if (plan && next === plan.step + 1 && prompt.includes('"timedOut":true')) return done(`its wait timed out after ${plan.step} steps: stopping`);
      if (next > steps) return done(`did ${next - 1} steps`);
      if (plan && next === plan.step) return toolUse(WAIT_TOOL[plan.kind], waitInput(plan, schedule.key, runId));
      return toolUse(toolOf(next), { n: next });
    };
    return faultScript({ runId, next, permanent: !!doomed && runId === doomed.runId && next === doomed.step, decision });
  });
  const model = schedule.model;

  let spawned = 0;
  const procs: Proc[] = [];
  const spawn = (): Proc => {
    const id = `w${spawned++}`;
    const clock = root.process();
    const runtime = openLocalRuntime({ dbPath, clock, log: silentLogger });
    const proc = { id, clock, runtime, dead: false, died: deferred<'died'>() } as Proc;
    const faults = {
      check: () => {
        if (proc.dead) throw new ProcessDied(id);
        if (brownoutCalls > 0) { brownoutCalls--; proc.renewalsStopped = 'a brownout'; throw new Brownout(); }
      },
    };
    const ledger = options.sabotage === 'ledger-forgets'
      ? { once: <T>(_key: string, _args: unknown, effect: (signal: AbortSignal) => Promise<T>) => effect(new AbortController().signal) }
      : options.sabotage === 'ledger-on-wall-clock' ? new SqliteLedger(runtime.db, { now: clock.now, every: clock.every }, silentLogger)
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
      waits: { events: runtime.events, maxTimerMs: MAX_TIMER_MS },
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
    // As runWorker does: a delivery with a receipt gets the worker's next receive folded into its checkpoint.
    const receive = delivery.receipt ? { receive: proc.runtime.queue.receiveInCommit(VISIBILITY_MS) } : {};
    const pending: Promise<Outcome> = handleDelivery(proc.deps, delivery, receive).then(
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
      if (!(outcome.error instanceof Brownout) && !givenUp(proc, outcome.error)) report.unexpected.push(`${proc.id}: ${String(outcome.error)}`);
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
    if (handled.next?.length) {
      // The worker's next delivery, in flight for it. Now and then it stops before starting it and hands it back.
      report.received = (report.received ?? 0) + handled.next.length;
      if (r.chance(0.05)) {
        for (const next of handled.next) await proc.runtime.queue.handBack(next);
        report.handedBack = (report.handedBack ?? 0) + handled.next.length;
      } else proc.held = handled.next[0];
    }
    if (handled.acked) return; // the step's own transaction acked it: there is no separate ack to lose
    if (r.chance(0.08)) { report.duplicates++; await proc.runtime.queue.release(delivery, 0); return; } // the ack was lost
    await proc.runtime.queue.ack(delivery);
  };

  try {
    for (let i = 0, n = r.int(2, 3); i < n; i++) spawn();
    for (const run of runs) await startRun(procs[0]!.deps, { goal: goalOf(schedule.key, run.runId, run.steps), runId: run.runId });
    const reader = openLocalRuntime({ dbPath, clock: root });
    const allEnded = async () => {
      for (const run of runs) if (!isTerminal((await reader.store.load(run.runId))!.status)) return false;
      return true;
    };

    // People and other systems answer waits through the API, which has its own connection to the file.
    const api: AnswerDeps = { store: reader.store, blobs: reader.blobs, queue: reader.queue, clock: root, workerId: 'api', codeVersion: 'chaos', log: silentLogger };
    const emitDeps = { ...api, events: reader.events, waitingFor: (type: string, key: string) => reader.store.waitingFor(type, key) };
    /** How many answers reported resolving each wait (resumed, or moved on as expired). */
    const answers = new Map<string, number>();
    const tracks = new Map<string, { waitId?: string; deadline?: number; given: number; secondAt?: number; done: boolean }>();
    for (const runId of plans.keys()) tracks.set(runId, { given: 0, done: false });
    let events = 0;

    /** One answer to a run's wait (an approval, or an event emitted); what became of it. */
    const answer = async (runId: string, plan: WaitPlan, waitId: string, again: boolean): Promise<AnswerOutcome['outcome'] | 'none'> => {
      let outcomes: AnswerOutcome[];
      if (plan.kind === 'approval' || plan.kind === 'gate') {
        const kind = again ? (r.chance(0.5) ? 'rejected' : 'approved') : plan.verdict ?? 'approved';
        outcomes = [await answerWait(api, { runId, waitId, answer: { kind, by: APPROVER } })];
      } else {
        // A second event is EventBridge delivering the same one again, or another event of the same kind.
        const id = again && r.chance(0.5) ? `evt-${runId}-${events}` : `evt-${runId}-${++events}`;
        outcomes = (await emitEvent(emitDeps, { type: EVENT_TYPE, key: `${schedule.key}-${runId}`, id })).resumed;
      }
      const mine = outcomes.filter((o) => o.runId === runId);
      for (const o of mine) if (o.outcome === 'resumed' || o.outcome === 'expired') answers.set(`${runId}/${waitId}`, (answers.get(`${runId}/${waitId}`) ?? 0) + 1);
      return mine[0]?.outcome ?? 'none';
    };

    /** Each turn: answer the waits that are due an answer by their plan. At the end, every answer still owed. */
    const answerWaits = async (turn: number, final: boolean) => {
      for (const [runId, plan] of plans) {
        const track = tracks.get(runId)!;
        if (track.done) continue;
        if (!track.waitId) {
          const stored = await reader.store.load(runId);
          if (stored?.status !== 'waiting') continue;
          const wait = decodeState(stored).wait!;
          Object.assign(track, { waitId: wait.id, deadline: wait.deadline });
          report.waits!++;
          if (plan.kind === 'gate') { report.gates!++; if (plan.verdict === 'approved' && plan.answer !== 'late' && plan.answer !== 'never') report.gatesApproved!++; }
          if (plan.answer === 'never') { if (plan.kind !== 'sleep') report.neverAnswered!++; track.done = true; continue; }
        }
        const waitId = track.waitId!;
        const late = root.now() >= track.deadline!;
        if (plan.answer === 'late') {
          // After the deadline, before or after its timer is delivered.
          if (!late || (!final && !r.chance(0.5))) continue;
          report.answeredLate!++;
          const outcome = await answer(runId, plan, waitId, false);
          // Refused cleanly: it moved the run on as the timer would have, or the timer had already.
          if (!['expired', 'already-answered', 'none'].includes(outcome)) report.unexpected.push(`${runId}: an answer after the deadline was ${outcome}`);
          track.done = true;
          continue;
        }
        if (track.given === 0) {
          const outcome = await answer(runId, plan, waitId, false);
          if (outcome !== 'resumed') report.unexpected.push(`${runId}: its first answer was ${outcome}, not resumed`);
          track.given = 1;
          if (plan.answer === 'once') track.done = true;
          else track.secondAt = turn + r.int(0, 5);
          continue;
        }
        if (turn < track.secondAt! && !final) continue;
        // The second answer must change nothing: the answer map catches one that resolves the wait again.
        report.answeredTwice!++;
        const outcome = await answer(runId, plan, waitId, true);
        if (!['already-answered', 'none'].includes(outcome)) report.unexpected.push(`${runId}: its second answer was ${outcome}`);
        track.done = true;
      }
    };

    /**
     * The machine's wall clock steps, for every process at once; the monotonic clock does not. Not while a
     * run waits: a wait's deadline is a time on the wall clock and moves with it (a known limit), which
     * would make its plan's answers late or early.
     */
    const stepClock = async (chance: number): Promise<boolean> => {
      if (report.clockSteps! >= maxClockSteps || !stepper.chance(chance)) return false;
      for (const run of runs) if ((await reader.store.load(run.runId))?.status === 'waiting') return false;
      root.ms += stepper.chance(0.6) ? stepper.int(VISIBILITY_MS + 1, CLOCK_STEP_MS) : -stepper.int(1_000, CLOCK_STEP_MS);
      report.clockSteps!++;
      return true;
    };

    let parkedWork: { delivery: Delivery; pending: Promise<Outcome>; turnsLeft: number } | undefined;
    let turn = 0;
    for (; turn < MAX_TURNS; turn++) {
      await answerWaits(turn, false);
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
      if (!parked && reader.queue.depth() === 0) {
        // Nothing on the queue: done, unless a run waits for a timer the queue does not hold yet. The
        // scheduled sweeper sends it once its deadline is within the lookahead.
        const open = await reader.store.dueWaits(Number.MAX_SAFE_INTEGER);
        if (!open.length) break;
        const gap = Math.min(...open.map((w) => w.deadline)) - TIMER_LOOKAHEAD_MS - root.now();
        if (gap > 0) await root.pass(gap);
        if (options.sabotage === 'timers-lost') { await root.pass(TIMER_LOOKAHEAD_MS + 1); break; }
        await sendDueTimers(api, { lookaheadMs: TIMER_LOOKAHEAD_MS });
        continue;
      }
      if (brownoutCalls === 0 && r.chance(0.02 * k)) { report.brownouts++; brownoutCalls = r.int(1, 8); }
      await stepClock(0.01 * k);

      const candidates = procs.filter((p) => !p.dead && p !== parked?.proc);
      // A worker holding its next delivery mostly goes on with it; one that does not leaves it in flight
      // (to come back after its visibility, to another worker, while the holder may still start it late).
      const holders = candidates.filter((p) => p.held);
      const proc = holders.length && r.chance(0.9) ? r.pick(holders) : r.pick(candidates);
      const held = proc.held;
      proc.held = undefined;
      const [delivery] = held ? [held] : await proc.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      if (!delivery) {
        await root.pass(r.chance(0.5) ? VISIBILITY_MS + 1 : r.int(1_000, 65_000));
        continue;
      }
      const { outcome, pending } = await handle(proc, delivery);
      if (outcome.kind === 'parked') {
        parkedWork = { delivery, pending, turnsLeft: r.int(1, 10) };
        // Most often while its holder is inside the effect: a step forward must not free the key beside it.
        // The other workers poll on at once, before the holder's next heartbeat (a third of the visibility
        // timeout on its monotonic timers) hides its message again: one of them may take the message.
        if (await stepClock(0.5)) continue;
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
        else if (dup.outcome.kind === 'error' && !(dup.outcome.error instanceof Brownout) && !givenUp(other, dup.outcome.error)) report.unexpected.push(`${other.id} (duplicate): ${String(dup.outcome.error)}`);
      }
      await settle(proc, delivery, outcome);
    }
    if (turn >= MAX_TURNS) report.unexpected.push(`schedule did not settle within ${MAX_TURNS} turns`);
    await answerWaits(turn, true);
    if (doomed) {
      // The permanent fault ends its run failed, with the API's reason, once the run gets to that step.
      const state = decodeState((await reader.store.load(doomed.runId))!);
      if (state.status === 'failed' && state.steps.length === doomed.step - 1 && !state.reason?.includes(`400 invalid_request_error: ${PERMANENT_FAULT}`)) {
        report.unexpected.push(`${doomed.runId}: failed at the permanent fault's step, but for ${state.reason}`);
      }
    }
    if (!(await allEnded()) && reader.queue.depth() === 0) { /* left for the invariants: stuck */ }

    const verdict = await checkInvariants({
      store: reader.store, runs, applied,
      injected: (reason) => !MODEL_OUTAGE_FAILURE.test(reason) && (reason.includes('injected') || /started \d+ times without finishing/.test(reason) || ADAPTER_FAULT.test(reason)
        || (report.hungTools! > 0 && HUNG_TOOL.test(reason))
        || [...plans].some(([runId, plan]) => (plan.answer === 'late' || plan.answer === 'never') && plan.kind !== 'sleep' && reason === waitTimedOut(runId))),
      answers, now: root.now(), blobs: reader.blobs, gated: gatedApplied,
    });
    report.gatedRuns = gatedApplied.size;
    Object.assign(report, {
      completed: verdict.completed, failed: verdict.failed, completedSteps: verdict.completedSteps, blobsChecked: verdict.blobsChecked,
      appliedTwice: verdict.appliedTwice, stepsLost: verdict.stepsLost, stuck: verdict.stuck, violations: verdict.violations,
      timedOut: verdict.timedOut, waitsTwice: verdict.waitsTwice,
    });
    reader.close();
  } finally {
    schedule.release();
    for (const proc of procs) { try { proc.runtime.close(); } catch { /* closed */ } }
    rmSync(dir, { recursive: true, force: true });
  }
  return report;
}

export type { Rng };
