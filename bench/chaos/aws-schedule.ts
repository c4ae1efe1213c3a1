/**
 * One seeded fault schedule over the AWS runtime: the SQS worker handler (lib/aws/sqs-worker-handler.ts)
 * in several Lambda "containers" (each its own SDK clients and clock on one time line), checkpoints and the
 * ledger in DynamoDB Local, blobs in S3 and the FIFO queue on fauxqs, and the sweeper every 5 minutes as
 * the stack schedules it. Faults drawn from the seed: a crash at any of C1-C8 or inside a `ctx.once`
 * effect (the container is dead from then on: none of its later AWS calls happen), a container frozen
 * inside an effect past its lease and the visibility timeout that comes back after another took over, an
 * effect that outlives the visibility timeout while its holder lives, two invocations handling one message
 * at once, copies of a message sent past the queue's deduplication, lost deletes, delayed redeliveries,
 * DynamoDB writes applied and then answered with an error (the SDK retries, or gives up), throttled calls,
 * messages dead-lettered (only the sweeper can move their run), and model faults from the local Messages
 * API server through the real Anthropic adapter (bench/chaos/model-server.ts: 429 bursts with retry-after,
 * 529, 500, connections dropped before or in the middle of a reply, replies slower than the client's
 * timeout, unusable replies, one permanent 400). The server's replies are the agents' decisions. In one
 * schedule of ten one effect never returns while its container lives, as in the engine's schedules: the
 * try ends at the tools' timeoutMs (bench/chaos/hangs.ts, real time), the claim waits out its lease, and
 * that schedule parks no container. A container's wall clock may step, its own alone (each is a machine):
 * ahead past the leases, most often while another waits inside an effect, or behind by up to two hours.
 *
 * Time is a ManualClock. This driver is the Lambda event source and SQS's clock for visibility: it
 * receives with a long real visibility timeout and makes a message visible again when the manual time
 * reaches the end of its visibility (the queue's 30 s, or what the handler asked for), so leases and
 * timeouts pass at once while the messages, receipts, ordering and deduplication are fauxqs's own.
 * Needs the servers' endpoints in the environment (useAwsServers()).
 */
import { randomUUID } from 'node:crypto';
import { DeleteTableCommand } from '@aws-sdk/client-dynamodb';
import { ChangeMessageVisibilityCommand, DeleteMessageCommand, DeleteQueueCommand, ReceiveMessageCommand, SendMessageCommand, type Message } from '@aws-sdk/client-sqs';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { pino } from 'pino';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition, type ToolContext } from '../../lib/agent.ts';
import { createAwsClients, type AwsClients } from '../../lib/aws/clients.ts';
import { ensureBucket, ensureQueue, ensureTable } from '../../lib/aws/provision.ts';
import { openAwsRuntime, type AwsRuntime } from '../../lib/aws/runtime.ts';
import { createSqsWorkerHandler, type SqsWorkerHandler } from '../../lib/aws/sqs-worker-handler.ts';
import { LEDGER_SK, PK, SK, ledgerPk } from '../../lib/aws/table-layout.ts';
import { TransientError } from '../../lib/core/errors.ts';
import { isTerminal } from '../../lib/core/state.ts';
import type { CrashPoint } from '../../lib/engine/deps.ts';
import { startRun } from '../../lib/engine/start.ts';
import { sweepStalledRuns } from '../../lib/engine/sweep.ts';
import { silentLogger, type Logger } from '../../lib/log.ts';
import type { IdempotencyLedger } from '../../lib/ports.ts';
import { DEFAULT_SWEEPER_STALL_MS } from '../../lib/settings.ts';
import { DEFAULT_LEASE_MS } from '../../lib/core/lease.ts';
import { ManualClock } from '../../test/support/manual-clock.ts';
import { toSqsRecord } from '../../test/aws/lambda-harness.ts';
import { apiError, done, toolUse, type Reply } from '../../test/support/messages-server.ts';
import { completedSteps } from '../../test/support/stub-model.ts';
import { deferred, type Deferred } from './deferred.ts';
import { ADAPTER_FAULT, toolOf, type ScheduleReport } from './engine-schedule.ts';
import { HUNG_TOOL, hangPlan } from './hangs.ts';
import { checkInvariants, type RunExpectation } from './invariants.ts';
import { MODEL_OUTAGE_FAILURE, modelFaultScript } from './model-faults.ts';
import { goalOf, registerSchedule, runOf } from './model-server.ts';
import { rng } from './random.ts';
import type { AwsFaults } from './totals.ts';

/** The furthest a container's wall clock steps, either way. */
const CLOCK_STEP_MS = 2 * 3_600_000;
/** The queue's visibility timeout (as the test resources create it): a receive no one finishes comes back then. */
const VISIBILITY_MS = 30_000;
/** What the driver really asks of fauxqs: longer than any schedule, so only the manual time ends a visibility. */
const REAL_VISIBILITY_SECONDS = 3_600;
/** The stack's sweep schedule (infra: sweepInterval) and the sweeper's stall window. */
const SWEEP_EVERY_MS = 5 * 60_000;
const STALL_MS = DEFAULT_SWEEPER_STALL_MS;
const MAX_TURNS = 1_500;
const CRASH_POINTS: readonly CrashPoint[] = ['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8'];
const WRITES = new Set(['PutItem', 'UpdateItem', 'DeleteItem', 'TransactWriteItems']);

export interface AwsScheduleReport extends ScheduleReport, AwsFaults {}

/**
 * A defect planted on purpose, to show that the schedules and the checker find one: a ledger whose claim
 * is bypassed (every effect runs each time it is asked), or no sweeper (a dead-lettered message's run
 * waits forever).
 */
export type AwsSabotage = 'ledger-bypassed' | 'no-sweeper';

/** Every fault this schedule injects says so, so anything else the handler logs is unexpected. */
class Injected extends Error {
  constructor(message: string, override readonly name = 'InjectedFault') {
    super(`injected ${message}`);
  }
}

interface Container {
  id: string;
  clock: ManualClock;
  clients: AwsClients;
  runtime: AwsRuntime;
  handler: SqsWorkerHandler;
  dead: boolean;
  died: Deferred<'died'>;
  invocations: number;
  /** Where this container's invocation stops until the other handler of the same message is done. */
  gate?: Gate;
  /** An injected fault that stopped its renewals (a freeze, a throttled call): a claim it gave up is explained. */
  renewalsStopped?: string;
}

interface Gate { point: CrashPoint; reached: Deferred<'paused'>; open: Deferred<void> }

/** A message this driver received and has not finished with: in flight until the manual time reaches `dueAt`. */
interface InFlight {
  messageId: string;
  receipt: string;
  receivedAt: number;
  /** Set when the invocation ended (or died): the message becomes visible again then. */
  dueAt?: number;
  /** The manual time until which the handler asked (ChangeMessageVisibility) to hide it. */
  hiddenUntil?: number;
}

type Outcome = { kind: 'handled'; failures: string[] } | { kind: 'error'; error: unknown } | { kind: 'died' } | { kind: 'parked' };
/** `afterEffect`: parked after a ledger-only effect, where only its renewals keep the key (afterLedgerOnly). */
type Park = { mode: 'freeze' | 'long'; container: Container; go: Deferred<void>; afterEffect?: boolean };

export async function awsSchedule(
  seed: number, options: { sabotage?: AwsSabotage; /** The chance that a schedule hangs one tool (default 0.1). */ hangs?: number } = {},
): Promise<AwsScheduleReport> {
  const r = rng(seed);
  const hang = hangPlan(seed, options.hangs);
  // Near the real time (history rows written on this clock must not look expired to the store), on a
  // whole hour so the sweeper's stall windows fall at the same moments of every replay.
  const root = new ManualClock(Math.floor(Date.now() / 3_600_000) * 3_600_000);
  const report: AwsScheduleReport = {
    seed, runs: 0, steps: 0, crashes: 0, crashesByPoint: {}, duplicates: 0, delayed: 0, brownouts: 0, slowWorkers: 0, longEffects: 0,
    modelFaults: 0, modelCalls: 0, modelFaultsByKind: {}, ambiguousWrites: 0, lostMessages: 0, redriven: 0, hungTools: 0,
    completed: 0, failed: 0, completedSteps: 0, blobsChecked: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, violations: [], unexpected: [],
    clockSteps: 0,
  };
  // The clock's steps come from a stream of their own, so the faults a seed drew before them are drawn alike.
  const stepper = rng(seed ^ 0x3c6ef372);
  const maxClockSteps = stepper.int(0, 3);

  const runs: RunExpectation[] = Array.from({ length: r.int(2, 3) }, (_, i) => ({ runId: `run-${i}`, steps: r.int(2, 5), toolOf }));
  const stepsOf = new Map(runs.map((run) => [run.runId, run.steps]));
  const doomed = r.chance(0.2) ? { runId: r.pick(runs).runId, step: 0 } : undefined;
  if (doomed) doomed.step = r.int(1, stepsOf.get(doomed.runId)!);
  report.runs = runs.length;
  report.steps = runs.reduce((n, run) => n + run.steps, 0);

  const applied = new Map<string, number>();
  const storedKeys = new Set<string>();
  const bump = (key: string) => applied.set(key, (applied.get(key) ?? 0) + 1);
  const maxCrashes = r.int(0, 5);
  let parked: Park | undefined;
  let parkSignal = deferred<'parked'>();
  let parkable: Container | undefined;
  let brownoutCalls = 0;

  // The table, bucket and queue of this schedule alone.
  const control = createAwsClients();
  const name = `chaos-${seed.toString(36)}-${randomUUID().slice(0, 6)}`;
  const [, , urls] = await Promise.all([
    ensureTable(control.dynamo, `stepwise-${name}`), ensureBucket(control.s3, `stepwise-${name}`),
    ensureQueue(control.sqs, `stepwise-${name}`, { visibilityTimeoutSeconds: VISIBILITY_MS / 1000 }),
  ]);
  const where = { tableName: `stepwise-${name}`, bucketName: `stepwise-${name}`, queueUrl: urls.queueUrl };
  const reader = openAwsRuntime({ ...where, clients: control, clock: root });

  const die = (c: Container) => {
    c.dead = true;
    c.clock.kill();
    c.died.resolve('died');
  };

  /** Inside an effect, after it claimed its key: maybe die here, freeze here, or run long. */
  const inside = async (c: Container, where: 'before' | 'after'): Promise<void> => {
    if (c.dead) throw new Injected(`call of dead container ${c.id}`);
    if (report.crashes < maxCrashes && r.chance(0.04)) {
      report.crashes++;
      report.crashesByPoint[`once-${where}`] = (report.crashesByPoint[`once-${where}`] ?? 0) + 1;
      die(c);
      return new Promise<void>(() => {}); // a killed process never gets past this point
    }
    if (hang.hangHere()) {
      // The container lives on; this effect never returns. Its try fails at the tool's timeoutMs.
      report.hungTools!++;
      return new Promise<void>(() => {});
    }
    if (parkable === c && !parked && r.chance(0.06) && !hang.hangs) {
      const mode = r.chance(0.5) ? 'freeze' : 'long';
      parked = { mode, container: c, go: deferred() };
      if (mode === 'freeze') { report.slowWorkers++; c.clock.freeze(); c.renewalsStopped = 'a freeze'; } else report.longEffects++;
      parkSignal.resolve('parked');
      await parked.go.promise;
    }
  };

  /**
   * After a ledger-only effect, only a live holder waiting long for its reply (a crash or a freeze there
   * is the case nothing can tell apart): its renewals alone keep the key from a second attempt, whatever
   * another machine's clock says. Drawn from the clock's stream, so the seeds' other faults stay.
   */
  const afterLedgerOnly = async (c: Container): Promise<void> => {
    if (c.dead) throw new Injected(`call of dead container ${c.id}`);
    if (parkable !== c || parked || hang.hangs || !stepper.chance(0.06)) return;
    parked = { mode: 'long', container: c, go: deferred(), afterEffect: true };
    report.longEffects++;
    parkSignal.resolve('parked');
    await parked.go.promise;
  };

  /** One container's wall clock steps (its machine's alone): ahead past the leases, or behind. */
  const stepClock = (candidates: Container[], chance: number): void => {
    if (report.clockSteps! >= maxClockSteps || !candidates.length || !stepper.chance(chance)) return;
    stepper.pick(candidates).clock.skew(stepper.chance(0.6) ? stepper.int(DEFAULT_LEASE_MS + 1_000, CLOCK_STEP_MS) : -stepper.int(1_000, CLOCK_STEP_MS));
    report.clockSteps!++;
  };

  const agentFor = (c: Container): AgentDefinition => defineAgent({
    name: 'chaos',
    tools: [
      tool({
        name: 'write_row', description: 'Write one row; the key is stored with it.', input: z.object({ n: z.number().int().positive() }), sideEffect: true,
        ...hang.toolTime,
        run: (input, ctx: ToolContext) => ctx.once(async () => {
          await inside(c, 'before');
          // The effect and its key commit together (a transaction in the target database).
          if (!storedKeys.has(ctx.idempotencyKey)) { storedKeys.add(ctx.idempotencyKey); bump(ctx.idempotencyKey); }
          await inside(c, 'after');
          // Most of these outputs go to S3, so those steps pass C5 too.
          return input.n % 3 !== 2 ? { n: input.n, log: 'x'.repeat(5_000) } : { n: input.n };
        }),
      }),
      tool({
        name: 'notify', description: 'Send one notice; only the ledger keeps it once.', input: z.object({ n: z.number().int().positive() }), sideEffect: true,
        ...hang.toolTime,
        run: (input, ctx: ToolContext) => ctx.once(async (signal) => {
          // Only before the effect: after a ledger-only effect, nothing can tell a crash from no effect.
          await inside(c, 'before');
          // The injected freeze's doing: a run whose tries end so often enough fails for a fault injected.
          if (signal.aborted) throw new TransientError('claim lost while frozen (an injected freeze)');
          bump(ctx.idempotencyKey);
          await afterLedgerOnly(c);
          return { sent: input.n };
        }),
      }),
    ],
  });

  // The model: the Messages API server's replies, scripted from each request's prompt as the engine
  // schedule's are, with faults drawn from a stream of their own: should a request the seed did not plan
  // reach the server, only the model faults after it shift, not the crashes and deliveries.
  const fault = (kind: string) => { report.modelFaults++; report.modelFaultsByKind![kind] = (report.modelFaultsByKind![kind] ?? 0) + 1; };
  const faultScript = modelFaultScript(seed, fault);
  const schedule = await registerSchedule((request): Reply => {
    report.modelCalls++;
    const runId = runOf(request) ?? '';
    const steps = stepsOf.get(runId);
    if (steps === undefined) return apiError(400, `chaos: no run ${runId}`);
    const next = completedSteps(request.userText) + 1;
    const decision = (): Reply => (next <= steps ? toolUse(toolOf(next), { n: next }) : done(`did ${next - 1} steps`));
    return faultScript({ runId, next, permanent: !!doomed && runId === doomed.runId && next === doomed.step, decision });
  });
  const model = schedule.model;

  /** The handler logs every record it could not finish; one no injected fault explains is a bug. */
  const handlerLog = (c: Container): Logger => pino({ level: 'error' }, {
    write: (line: string) => {
      const entry = JSON.parse(line) as { event?: string; error?: string; msg?: string };
      const error = entry.error ?? entry.msg ?? line;
      // A claim its holder gave up, no renewal confirmed: the engine steps away as from a crash (a delivery
      // error), explained where a freeze or a throttled call stopped this container's renewals.
      if (c.renewalsStopped && /^the claim on idempotency key \S+ was lost: no renewal was confirmed/.test(error)) return;
      if (!/injected|dead container|claim lost while frozen/.test(error) && !ADAPTER_FAULT.test(error)) report.unexpected.push(`${c.id} ${entry.event ?? ''}: ${error}`);
    },
  });

  // Messages this driver received and has not deleted, by receipt.
  const inFlight = new Map<string, InFlight>();
  const firstReceivedAt = new Map<string, number>();
  /** When each message a container sent was sent, on the manual time line (SQS's clock here). */
  const sentAt = new Map<string, number>();

  let spawned = 0;
  const containers: Container[] = [];
  const spawn = (): Container => {
    const clients = createAwsClients();
    const c = { id: `c${spawned++}`, clock: root.process(), clients, dead: false, died: deferred<'died'>(), invocations: 0 } as Container;
    const stacks = [clients.dynamo.middlewareStack, clients.doc.middlewareStack, clients.sqs.middlewareStack, clients.s3.middlewareStack];
    for (const stack of stacks) {
      (stack as { add(m: unknown, o: unknown): void }).add(
        (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
          // Nothing of a killed process reaches a server; a throttled call fails as the SDK's last retry does.
          if (c.dead) throw new Injected(`call of dead container ${c.id}`);
          // Not the calls of a holder parked after a ledger-only effect: throttled through a whole lease, its
          // renewals all fail and its claim lapses, a holder cut off from the table, which nothing can tell
          // from a frozen one (seed 2284402602: three renewals in a row refused, the effect applied twice).
          const cutOff = parked?.afterEffect && parked.container === c;
          if (brownoutCalls > 0 && !cutOff) {
            brownoutCalls--;
            c.renewalsStopped = 'a brownout';
            throw new Injected('throttle: rate exceeded', 'ThrottlingException');
          }
          return next(args);
        },
        { step: 'initialize', name: `chaos-dead-${randomUUID()}` },
      );
    }
    // The handler's ChangeMessageVisibility goes to this driver, which is SQS's clock for visibility, and
    // its sends are stamped on that clock (SentTimestamp, from which SQS measures a backoff's delay).
    (clients.sqs.middlewareStack as { add(m: unknown, o: unknown): void }).add(
      (next: (args: { input: { ReceiptHandle?: string; VisibilityTimeout?: number } }) => Promise<unknown>, context: { commandName?: string }) =>
        async (args: { input: { ReceiptHandle?: string; VisibilityTimeout?: number } }) => {
          if (context.commandName === 'SendMessageCommand') {
            const at = root.now();
            const result = await next(args) as { output?: { MessageId?: string } };
            if (result.output?.MessageId) sentAt.set(result.output.MessageId, at);
            return result;
          }
          if (context.commandName !== 'ChangeMessageVisibilityCommand') return next(args);
          const entry = inFlight.get(args.input.ReceiptHandle ?? '');
          if (!entry) throw Object.assign(new Error('Message does not exist or is not available for visibility timeout change'), { name: 'MessageNotInflight' });
          entry.hiddenUntil = root.now() + (args.input.VisibilityTimeout ?? 0) * 1000;
          return { output: { $metadata: {} } };
        },
      { step: 'initialize', priority: 'low', name: `chaos-visibility-${randomUUID()}` },
    );
    // An ambiguous write: DynamoDB applied it, then its answer is lost. Inside the SDK's retry loop, so the
    // SDK sends it again (and the store must read the retry's condition failure as its own write), unless
    // every attempt's answer is lost and the caller gets the error after the write was applied.
    let losing = 0;
    (clients.doc.middlewareStack as { add(m: unknown, o: unknown): void }).add(
      (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
        const target = (args as { request?: { headers?: Record<string, string> } }).request?.headers?.['x-amz-target'] ?? '';
        let answer: unknown;
        try { answer = await next(args); } catch (error) { losing = 0; throw error; }
        if (!WRITES.has(target.split('.')[1] ?? '')) return answer;
        if (losing === 0 && r.chance(0.03)) { report.ambiguousWrites++; losing = r.chance(0.2) ? 3 : 1; }
        if (losing > 0) {
          losing--;
          throw Object.assign(new Error('injected: internal error after the write was applied'), {
            name: 'InternalServerError', $fault: 'server', $metadata: { httpStatusCode: 500 },
          });
        }
        return answer;
      },
      { step: 'finalizeRequest', priority: 'low', name: `chaos-ambiguous-${randomUUID()}` },
    );
    c.runtime = openAwsRuntime({ ...where, clients, clock: c.clock });
    const bypassed: IdempotencyLedger = { once: async (_key, _args, effect) => effect(new AbortController().signal) };
    c.handler = createSqsWorkerHandler({
      runtime: { ...c.runtime, ...(options.sabotage === 'ledger-bypassed' ? { ledger: bypassed } : {}) },
      agent: agentFor(c), model, log: handlerLog(c), codeVersion: 'chaos', clock: c.clock,
      probe: async (point: CrashPoint) => {
        if (c.dead) throw new Injected(`call of dead container ${c.id}`);
        const gate = c.gate;
        if (gate?.point === point) {
          c.gate = undefined;
          gate.reached.resolve('paused');
          await gate.open.promise;
        }
        if (report.crashes < maxCrashes && r.chance(0.03)) {
          report.crashes++;
          report.crashesByPoint[point] = (report.crashesByPoint[point] ?? 0) + 1;
          die(c);
          throw new Injected(`crash at ${point}`);
        }
      },
    });
    containers.push(c);
    return c;
  };
  const retire = (c: Container) => {
    containers.splice(containers.indexOf(c), 1);
    c.clients.destroy();
    spawn();
  };

  /** Makes the messages whose visibility ended visible again. */
  const releaseDue = async () => {
    for (const entry of [...inFlight.values()]) {
      if (entry.dueAt === undefined || entry.dueAt > root.now()) continue;
      inFlight.delete(entry.receipt);
      await control.sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: urls.queueUrl, ReceiptHandle: entry.receipt, VisibilityTimeout: 0 }))
        .catch(() => undefined); // deleted meanwhile
    }
  };

  let nextSweepAt = root.now() + SWEEP_EVERY_MS;
  /** Moves the manual time on, running the sweeper at each scheduled time it passes, as EventBridge would. */
  const passTime = async (ms: number) => {
    const target = root.now() + ms;
    while (nextSweepAt <= target) {
      await root.pass(nextSweepAt - root.now());
      nextSweepAt += SWEEP_EVERY_MS;
      if (options.sabotage === 'no-sweeper') continue;
      const requeued = await sweepStalledRuns({ store: reader.store, queue: reader.queue, clock: root, log: silentLogger }, { stallMs: STALL_MS });
      report.redriven += requeued.length;
    }
    await root.pass(target - root.now());
    await releaseDue();
  };

  /**
   * Awaits what an invocation comes to. One that watches a claim before taking it over sleeps on its own
   * time meanwhile (lib/aws/dynamo-ledger.ts): the time passes for it, and for the sweeper and the queue.
   */
  const settle = <T>(promise: Promise<T>): Promise<T> => root.settle(promise, passTime);

  /** The end of an invocation for the event source: delete what succeeded, the rest comes back later. */
  const finish = async (messages: Message[], receivedAt: number, outcome: Outcome) => {
    for (const m of messages) {
      const entry = inFlight.get(m.ReceiptHandle!);
      if (!entry) continue; // its visibility ended while the invocation ran: another receive has it now
      const failed = outcome.kind !== 'handled' || outcome.failures.includes(m.MessageId!);
      if (!failed) {
        if (r.chance(0.05)) { report.duplicates++; entry.dueAt = receivedAt + VISIBILITY_MS; continue; } // the delete was lost
        inFlight.delete(m.ReceiptHandle!);
        await control.sqs.send(new DeleteMessageCommand({ QueueUrl: urls.queueUrl, ReceiptHandle: m.ReceiptHandle! }));
        continue;
      }
      const extra = r.chance(0.15) ? r.int(1, 20_000) : 0;
      if (extra) report.delayed++;
      entry.dueAt = (outcome.kind === 'handled' && entry.hiddenUntil !== undefined ? entry.hiddenUntil : receivedAt + VISIBILITY_MS) + extra;
    }
  };

  const invoke = (c: Container, messages: Message[]): Promise<Outcome> => {
    const records = messages.map((m) => {
      const record = toSqsRecord(m, urls.queueUrl);
      // SQS's first-receive time on the manual time line, which the handler compares with notBefore.
      record.attributes.ApproximateFirstReceiveTimestamp = String(firstReceivedAt.get(m.MessageId!));
      // Likewise its send (a message the sweeper or the driver sent carries no delay to measure from it).
      const sent = sentAt.get(m.MessageId!);
      if (sent !== undefined) record.attributes.SentTimestamp = String(sent);
      else delete (record.attributes as { SentTimestamp?: string }).SentTimestamp;
      return record;
    });
    return c.handler({ Records: records }, { awsRequestId: `${c.id}-${++c.invocations}` }).then(
      (response) => ({ kind: 'handled' as const, failures: response.batchItemFailures.map((f) => f.itemIdentifier) }),
      (error: unknown) => ({ kind: 'error' as const, error }),
    );
  };

  try {
    for (let i = 0, n = r.int(2, 3); i < n; i++) spawn();
    for (const run of runs) {
      await startRun({ store: reader.store, queue: reader.queue, agent: agentFor(containers[0]!), clock: root, workerId: 'starter', codeVersion: 'chaos', log: silentLogger },
        { goal: goalOf(schedule.key, run.runId, run.steps), runId: run.runId });
    }
    let parkedWork: { messages: Message[]; receivedAt: number; pending: Promise<Outcome>; turnsLeft: number } | undefined;
    let idleSince: number | undefined;
    let turn = 0;
    for (; turn < MAX_TURNS; turn++) {
      if (parked && parkedWork && --parkedWork.turnsLeft <= 0) {
        const { container } = parked;
        if (parked.mode === 'freeze') await container.clock.thaw();
        parked.go.resolve();
        const work = parkedWork;
        parked = undefined; parkedWork = undefined;
        const outcome = await settle(Promise.race([work.pending, container.died.promise.then(() => ({ kind: 'died' as const }))]));
        await finish(work.messages, work.receivedAt, outcome);
        if (container.dead) retire(container);
        continue;
      }
      if (brownoutCalls === 0 && r.chance(0.02)) { report.brownouts++; brownoutCalls = r.int(1, 4); }
      stepClock(containers.filter((x) => !x.dead), 0.01);

      const c = r.pick(containers.filter((x) => !x.dead && x !== parked?.container));
      // One message per invocation: a batch's runs are handled in parallel, and their order of drawing
      // from the seed would then depend on the servers' timing.
      const { Messages = [] } = await control.sqs.send(new ReceiveMessageCommand({
        QueueUrl: urls.queueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 0, VisibilityTimeout: REAL_VISIBILITY_SECONDS,
        MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
      }));
      const receivedAt = root.now();
      const messages: Message[] = [];
      for (const m of Messages) {
        if (r.chance(0.02)) {
          // Dead-lettered: gone from the queue with its run still running; only the sweeper brings it back.
          report.lostMessages++;
          await control.sqs.send(new DeleteMessageCommand({ QueueUrl: urls.queueUrl, ReceiptHandle: m.ReceiptHandle! }));
          continue;
        }
        if (!firstReceivedAt.has(m.MessageId!)) firstReceivedAt.set(m.MessageId!, receivedAt);
        inFlight.set(m.ReceiptHandle!, { messageId: m.MessageId!, receipt: m.ReceiptHandle!, receivedAt });
        messages.push(m);
      }
      if (Messages.length && !messages.length) {
        // A run just lost its message: the sweeper's wait for it starts now (see the idle rule below).
        idleSince = undefined;
        continue;
      }
      if (!messages.length) {
        const ended = await Promise.all(runs.map(async (run) => isTerminal((await reader.store.load(run.runId))!.status)));
        const waiting = [...inFlight.values()];
        if (!parked && waiting.length === 0 && Messages.length === 0) {
          if (ended.every(Boolean)) break;
          // Nothing on its way: only the sweeper can move the rest. Give it its stall window and two sweeps,
          // counted from the last message lost. A re-driven message lost again is sent again only with the
          // sweeper's next deduplication token (one per stall window): fauxqs keeps a deduplication id for 5
          // minutes of real time, the whole schedule on the manual clock. Seed 2414154359 lost its re-drive
          // at 34:51; counted from the run's first idle moment, the schedule ended there, before 45:00's.
          idleSince ??= root.now();
          if (root.now() - idleSince > STALL_MS + 2 * SWEEP_EVERY_MS) break;
        } else idleSince = undefined;
        const dues = waiting.map((e) => e.dueAt).filter((d): d is number => d !== undefined);
        await passTime(dues.length ? Math.max(1, Math.min(...dues) - root.now()) : SWEEP_EVERY_MS);
        continue;
      }
      idleSince = undefined;

      // Copies of the message past the queue's deduplication, as a producer's retry could send them.
      if (r.chance(0.04)) {
        report.duplicates++;
        await control.sqs.send(new SendMessageCommand({
          QueueUrl: urls.queueUrl, MessageBody: messages[0]!.Body!, MessageGroupId: messages[0]!.Attributes?.MessageGroupId!, MessageDeduplicationId: randomUUID(),
        }));
      }

      // Two handlers on one message (SQS delivers at least once): the twin runs up to a crash point
      // drawn from the seed, waits there while the first handles the message, then goes on; its answer
      // is dropped. Interleaved at a chosen point, not raced, so the schedule stays a function of its seed.
      const others = containers.filter((x) => !x.dead && x !== c && x !== parked?.container);
      const twin = others.length && r.chance(0.08) ? r.pick(others) : undefined;
      let twinDone: Promise<Outcome> | undefined;
      const gate: Gate = { point: r.pick(CRASH_POINTS), reached: deferred(), open: deferred() };
      if (twin) {
        report.duplicates++;
        twin.gate = gate;
        twinDone = invoke(twin, messages);
        await settle(Promise.race([gate.reached.promise, twinDone, twin.died.promise]));
      }
      parkSignal = deferred<'parked'>();
      parkable = c;
      const pending = invoke(c, messages);
      const outcome = await settle(Promise.race([
        pending, c.died.promise.then(() => ({ kind: 'died' as const })), parkSignal.promise.then(() => ({ kind: 'parked' as const })),
      ]));
      parkable = undefined;
      if (twin && twinDone) {
        twin.gate = undefined;
        gate.open.resolve();
        const o = await settle(Promise.race([twinDone, twin.died.promise.then(() => ({ kind: 'died' as const }))]));
        if (o.kind === 'error') report.unexpected.push(`${twin.id} (twin): ${String(o.error)}`);
        if (twin.dead) retire(twin);
      }
      if (outcome.kind === 'parked') {
        for (const m of messages) { const e = inFlight.get(m.ReceiptHandle!); if (e) e.dueAt = receivedAt + VISIBILITY_MS; }
        parkedWork = { messages, receivedAt, pending, turnsLeft: r.int(1, 8) };
        // Most often now: another machine whose clock runs ahead must not take the key from a live holder.
        stepClock(containers.filter((x) => !x.dead && x !== c), 0.5);
        // Another container may take the message (and, past the lease, the key) while this one is away.
        await passTime(r.chance(0.5) ? VISIBILITY_MS + 1 : 61_000 + VISIBILITY_MS);
        continue;
      }
      if (outcome.kind === 'error') report.unexpected.push(`${c.id}: ${String(outcome.error)}`);
      await finish(messages, receivedAt, outcome);
      if (c.dead) retire(c);
    }
    if (turn >= MAX_TURNS) report.unexpected.push(`schedule did not settle within ${MAX_TURNS} turns`);

    const verdict = await checkInvariants({
      store: reader.store, runs, applied, blobs: reader.blobs,
      injected: (reason) => !MODEL_OUTAGE_FAILURE.test(reason) && (reason.includes('injected') || /started \d+ times without finishing/.test(reason) || ADAPTER_FAULT.test(reason)
        || (report.hungTools! > 0 && HUNG_TOOL.test(reason))),
      // Both tools apply through ctx.once: the ledger in DynamoDB must have every completed step's result.
      ledgerHasResult: async (key) => {
        const { Item } = await control.doc.send(new GetCommand({ TableName: where.tableName, Key: { [PK]: ledgerPk(key), [SK]: LEDGER_SK }, ConsistentRead: true }));
        return Item?.result !== undefined || Item?.resultRef !== undefined;
      },
    });
    Object.assign(report, {
      completed: verdict.completed, failed: verdict.failed, completedSteps: verdict.completedSteps, blobsChecked: verdict.blobsChecked,
      appliedTwice: verdict.appliedTwice, stepsLost: verdict.stepsLost, stuck: verdict.stuck, violations: verdict.violations,
    });
  } finally {
    schedule.release();
    // A parked invocation is let go so nothing is left waiting; its container's clients are gone.
    parked?.go.resolve();
    for (const c of containers) { c.dead = true; c.clients.destroy(); }
    // The servers outlive the schedule (and serve other tests): drop its table and queues.
    await Promise.all([
      control.dynamo.send(new DeleteTableCommand({ TableName: where.tableName })),
      ...[urls.queueUrl, urls.dlqUrl].map((QueueUrl) => control.sqs.send(new DeleteQueueCommand({ QueueUrl }))),
    ]).catch(() => undefined);
    control.destroy();
  }
  return report;
}
