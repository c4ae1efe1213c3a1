import { afterEach, describe, expect, it } from 'vitest';
import { advance } from '../../lib/engine/advance.ts';
import { cancelRun } from '../../lib/engine/operate/cancel.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import type { Model } from '../../lib/ports.ts';
import { StaleVersionError, TransientError } from '../../lib/core/errors.ts';
import { cancelRequest } from '../../lib/core/operate.ts';
import { answerWait } from '../../lib/waits/answer.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { captureLogs } from '../aws/log-capture.ts';
import { gate } from '../support/gate.ts';
import { ManualClock, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { APPROVER, ApprovalFlowModel, waitAgent } from '../support/wait-agent.ts';

describe('cancel', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /** A run writing `steps` rows on a worker of its own, its first step taken. */
  async function afterStep1(steps: number) {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const model = new StubModel(writeRowsScript(steps));
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model, clock, workerId: 'A' });
    await start(w.deps);
    await advance(w.deps, 'run');
    return { w, clock, rows, model };
  }

  /** A worker whose model call for step 2 (the one that asks for approval) is held until `held.open()`. */
  function heldAtApproval() {
    db = tempDb();
    const clock = new ManualClock();
    const held = gate();
    const inner = new ApprovalFlowModel();
    const model: Model = { name: inner.name, decide: async (request) => { if (request.step === 2) await held.wait(); return inner.decide(request); } };
    const w = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), []), model, clock, workerId: 'A' });
    return { w, held, clock, inner };
  }

  /**
   * Step 2 saves the wait while `cancel` is asked for: the wait is saved with that request beside it, not
   * yet applied (advance alone goes no further; the delivery's driveWait never runs). Returns the cancel's outcome.
   */
  async function waitSavedUnderCancel(w: ReturnType<typeof heldAtApproval>['w'], held: ReturnType<typeof gate>, cancel: () => Promise<unknown>) {
    await start(w.deps);
    await advance(w.deps, 'run');
    // A worker holds the run's message while it steps (a cancel takes a message no worker holds, and applies itself).
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const stepping = advance(w.deps, 'run');
    await held.reached;
    const outcome = await cancel();
    held.open();
    expect(await stepping).toMatchObject({ kind: 'advanced', state: { status: 'waiting' } });
    await w.runtime.queue.ack(delivery!);
    return outcome;
  }

  it('a running run stops at its next step boundary: no model call, no tool; cancelled, with who and why', async () => {
    const { w, clock, rows, model } = await afterStep1(5);
    // A worker has taken the run's next message: the cancel leaves the run to it.
    const [inFlight] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const outcome = await cancelRun(w.deps, 'run', { by: 'ops@example.com', reason: 'wrong table' });
    expect(outcome).toMatchObject({ outcome: 'requested', runId: 'run', version: 2 });
    // Until the boundary the run is still running, with the request on it.
    const requested = (await w.runtime.store.load('run'))!;
    expect(requested).toMatchObject({ status: 'running', version: 2, cancelRequested: expect.stringMatching(/^by ops@example\.com at \d{4}-.*: wrong table$/) });
    // A second cancel changes nothing, and says whose request stands.
    expect(await cancelRun(w.deps, 'run', { by: 'someone-else', reason: 'mine' })).toEqual({ outcome: 'requested', runId: 'run', version: 2, request: requested.cancelRequested, earlier: true });
    expect(outcome).not.toHaveProperty('earlier');
    // The worker's delivery is the boundary: it applies the request before anything else.
    await handleDelivery(w.deps, inFlight!);
    await w.runtime.queue.ack(inFlight!);
    await drain(w.deps, w.runtime, clock);
    const state = await loadState(w.runtime);
    expect(state).toMatchObject({ status: 'cancelled', step: 1, reason: expect.stringMatching(/^cancelled by ops@example\.com at .*: wrong table$/) });
    expect(model.stepsAsked()).toEqual([1]);
    expect(rows.received).toEqual(['run/step-1']);
    expect((await w.runtime.store.history('run')).at(-1)).toMatchObject({ version: 3, step: 1, status: 'cancelled' });
    // It never advances again, whatever message comes for it.
    await w.runtime.queue.redrive({ runId: 'run', version: 3 });
    await w.runtime.queue.send({ runId: 'run', version: 2 });
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toEqual(state);
    expect(model.stepsAsked()).toEqual([1]);
    expect(await cancelRun(w.deps, 'run', { by: 'ops@example.com' })).toMatchObject({ outcome: 'already-cancelled', version: 3 });
    w.runtime.close();
  });

  for (const local of [true, false]) {
    const how = local ? 'the local queue: the cancel takes it and applies that request itself' : 'a queue that cannot take it (SQS): the next delivery applies that request';
    it(`a repeated cancel redrives the run whose first cancel wrote its request but never redrove it; the first request stands (${how})`, async () => {
      const { w, clock, model } = await afterStep1(5);
      // The run's message is gone (taken and acked with no successor), and a cancel's process wrote its
      // request, as cancelRun's first write does, then was killed before redriving the run.
      for (let d; (d = (await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS }))[0]);) await w.runtime.queue.ack(d);
      expect(w.runtime.queue.depth()).toBe(0);
      const first = cancelRequest('ops@example.com', clock.now(), 'wrong table');
      await w.runtime.store.requestCancel('run', 2, first);
      const queue = local ? w.runtime.queue : { send: w.runtime.queue.send.bind(w.runtime.queue), redrive: w.runtime.queue.redrive.bind(w.runtime.queue) };
      const outcome = await cancelRun({ ...w.deps, queue }, 'run', { by: 'someone-else', reason: 'mine' });
      if (local) {
        expect(outcome).toEqual({ outcome: 'cancelled', runId: 'run', version: 3, request: first, idle: true, earlier: true });
        expect(w.runtime.queue.depth()).toBe(0);
      } else {
        expect(outcome).toEqual({ outcome: 'requested', runId: 'run', version: 2, request: first, earlier: true });
        // The run has its message again, and the next delivery applies the first request: no sweep needed.
        expect(w.runtime.queue.depth()).toBe(1);
        expect(await workVisible(w.deps, w.runtime)).toBe(1);
      }
      expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', step: 1, reason: expect.stringMatching(/^cancelled by ops@example\.com at .*: wrong table$/) });
      expect(model.stepsAsked()).toEqual([1]);
      w.runtime.close();
    });
  }

  it('a running run no worker holds (none running) is cancelled by the cancel itself, which takes its message; one a worker holds is left to that worker', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const model = new StubModel(writeRowsScript(5));
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model, clock, workerId: 'A' });
    await start(w.deps, 'go', 'idle');
    await start(w.deps, 'go', 'held');
    await drainOne(w, 'idle');
    await drainOne(w, 'held');
    // A worker has received held's message; idle's waits on the queue with nobody to take it.
    const [holding] = await w.runtime.queue.forRun('held').receive({ visibilityMs: VISIBILITY_MS });
    expect(await cancelRun(w.deps, 'idle', { by: 'ops@example.com' })).toMatchObject({ outcome: 'cancelled', runId: 'idle', version: 3, idle: true, request: expect.stringMatching(/^by ops@example\.com at /) });
    expect(await w.runtime.store.load('idle')).toMatchObject({ status: 'cancelled', version: 3 });
    expect(await cancelRun(w.deps, 'held', { by: 'ops@example.com' })).toMatchObject({ outcome: 'requested', version: 2 });
    expect(await w.runtime.store.load('held')).toMatchObject({ status: 'running', version: 2 });
    // The cancel took idle's message and acked it: nothing is left on the queue for it; held's is still in the worker's hands.
    expect(w.runtime.queue.depth()).toBe(1);
    await handleDelivery(w.deps, holding!);
    await w.runtime.queue.ack(holding!);
    expect(await w.runtime.store.load('held')).toMatchObject({ status: 'cancelled', version: 3 });
    expect(model.stepsAsked()).toEqual([1, 1]);
    // Its lease out (a worker frozen past it), the message is there to take again: the cancel applies itself.
    await start(w.deps, 'go', 'frozen');
    await drainOne(w, 'frozen');
    await w.runtime.queue.forRun('frozen').receive({ visibilityMs: VISIBILITY_MS });
    expect(await cancelRun(w.deps, 'frozen', { by: 'ops' })).toMatchObject({ outcome: 'requested' });
    clock.advance(VISIBILITY_MS + 1);
    expect(await cancelRun(w.deps, 'frozen', { by: 'ops' })).toMatchObject({ outcome: 'cancelled', idle: true, earlier: true });
    w.runtime.close();
  });

  it('a cancel that took the run\'s message and then lost to the run hands the message back, uncounted, and leaves its request', async () => {
    const { w, model } = await afterStep1(5);
    const before = w.runtime.db.prepare("SELECT receive_count FROM queue WHERE run_id = 'run'").get() as { receive_count: number };
    // The run moves between the cancel's take and its commit (a worker that had the message as its lease ran out).
    const store = Object.assign(Object.create(w.runtime.store) as typeof w.runtime.store, {
      commit: async (write: Parameters<typeof w.runtime.store.commit>[0]) => { throw new StaleVersionError(write.runId, write.expectedVersion); },
    });
    expect(await cancelRun({ ...w.deps, store }, 'run', { by: 'ops@example.com' })).toMatchObject({ outcome: 'requested', version: 2 });
    // The message is visible again at once, its receive not counted: the next worker applies the request.
    const row = w.runtime.db.prepare("SELECT receive_count, receipt FROM queue WHERE run_id = 'run'").get() as { receive_count: number; receipt: string | null };
    expect(row).toEqual({ receive_count: before.receive_count, receipt: null });
    expect(await workVisible(w.deps, w.runtime)).toBe(1);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', step: 1 });
    expect(model.stepsAsked()).toEqual([1]);
    w.runtime.close();
  });

  /** The run's first step, by a worker that receives only its message. */
  async function drainOne(w: ReturnType<typeof workerProcess>, runId: string) {
    const [d] = await w.runtime.queue.forRun(runId).receive({ visibilityMs: VISIBILITY_MS });
    await handleDelivery(w.deps, d!);
    await w.runtime.queue.ack(d!);
  }

  it('a waiting run is cancelled at once; an answer, an event or its timer that comes later changes nothing', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const dropped: string[] = [];
    const model = new ApprovalFlowModel();
    const w = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), dropped), model, clock, workerId: 'A' });
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    const waiting = await loadState(w.runtime);
    expect(waiting.status).toBe('waiting');
    const outcome = await cancelRun(w.deps, 'run', { by: 'ops@example.com' });
    expect(outcome).toMatchObject({ outcome: 'cancelled', version: 4 });
    const cancelled = await loadState(w.runtime);
    expect(cancelled).toMatchObject({ status: 'cancelled', step: 1 });
    expect(cancelled.wait).toBeUndefined();
    // The wait is dropped; the reason says what the run waited for, as `show` and `history` give it.
    expect(cancelled.reason).toMatch(new RegExp(`^cancelled by ops@example\\.com at \\S+ \\(it waited for approval by ${APPROVER.replace('.', '\\.')} at step 2\\)$`));
    expect(await w.runtime.store.dueWaits(Number.MAX_SAFE_INTEGER)).toEqual([]);
    const answer = await answerWait(w.deps, { runId: 'run', waitId: waiting.wait!.id, answer: { kind: 'approved', by: APPROVER } });
    expect(answer).toMatchObject({ outcome: 'not-waiting', status: 'cancelled' });
    // The wait's timer comes due: nothing moves, and the log says so rather than that the run is re-driven.
    const { log, lines } = captureLogs();
    w.deps.log = log;
    clock.advance(2 * 3_600_000);
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toEqual(cancelled);
    expect(lines.filter((l) => l.event === 'stale-message').map((l) => [l.status, l.msg])).toEqual([['cancelled', 'message for an older version: the run is cancelled: nothing to do']]);
    expect(model.prompts).toHaveLength(2);
    expect(dropped).toEqual([]);
    w.runtime.close();
  });

  it('a cancel that comes while a step begins a wait cancels the run as soon as the wait is saved', async () => {
    const { w, held, clock, inner } = heldAtApproval();
    await start(w.deps);
    const [first] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await handleDelivery(w.deps, first!);
    await w.runtime.queue.ack(first!);
    const [delivery] = await w.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const handling = handleDelivery(w.deps, delivery!);
    await held.reached;
    expect(await cancelRun(w.deps, 'run', { by: 'ops@example.com' })).toMatchObject({ outcome: 'requested', version: 2 });
    held.open();
    await handling;
    await w.runtime.queue.ack(delivery!);
    const state = await loadState(w.runtime);
    expect(state).toMatchObject({ status: 'cancelled', step: 1 });
    expect((await w.runtime.store.history('run')).map((h) => h.status)).toEqual(['running', 'running', 'waiting', 'cancelled']);
    await drain(w.deps, w.runtime, clock);
    expect((await loadState(w.runtime)).status).toBe('cancelled');
    expect(inner.prompts).toHaveLength(2);
    w.runtime.close();
  });

  it('an answer that comes before the worker that saved the wait applies the cancel finds the run cancelled', async () => {
    const { w, held } = heldAtApproval();
    await waitSavedUnderCancel(w, held, () => cancelRun(w.deps, 'run', { by: 'ops@example.com' }));
    const waiting = await loadState(w.runtime);
    const answer = await answerWait(w.deps, { runId: 'run', waitId: waiting.wait!.id, answer: { kind: 'approved', by: APPROVER } });
    expect(answer).toMatchObject({ outcome: 'not-waiting', status: 'cancelled' });
    expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', step: 1 });
    w.runtime.close();
  });

  it('a second cancel of a run whose wait was saved under an earlier request applies that request: its who and why stand', async () => {
    const { w, held } = heldAtApproval();
    // The wait is saved with the first request beside it; nothing has applied it yet.
    const first = await waitSavedUnderCancel(w, held, () => cancelRun(w.deps, 'run', { by: 'ops@example.com', reason: 'wrong table' }));
    expect(first).toMatchObject({ outcome: 'requested' });
    expect(await w.runtime.store.load('run')).toMatchObject({ status: 'waiting', cancelRequested: (first as { request: string }).request });
    const second = await cancelRun(w.deps, 'run', { by: 'someone-else', reason: 'mine' });
    expect(second).toEqual({ outcome: 'cancelled', runId: 'run', version: 4, request: (first as { request: string }).request, earlier: true });
    expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', reason: expect.stringMatching(/^cancelled by ops@example\.com at .*: wrong table \(it waited for approval by ops@example\.com at step 2\)$/) });
    w.runtime.close();
  });

  /** Step 2's tool fails, rate limited for 10 minutes: the next try's message is delayed that long. */
  function rateLimitedAtStep2(queueInCommit: boolean, before?: () => Promise<void>) {
    db = tempDb();
    const clock = new ManualClock();
    const agent = rowsAgent(new FakeRows(), {
      afterWrite: async (step) => {
        if (step !== 2) return;
        await before?.();
        throw new TransientError('rate limited', { retryAfterMs: 600_000 });
      },
    });
    return { w: workerProcess({ dbPath: db.path, agent, model: new StubModel(writeRowsScript(5)), clock, workerId: 'A', queueInCommit }), clock };
  }

  // The clock never moves in these: the cancel is applied by what is visible now, not after the backoff.
  for (const queueInCommit of [true, false]) {
    const where = queueInCommit ? 'in the checkpoint\'s transaction' : 'after the checkpoint, as on AWS';
    it(`a run waiting out a failed try's backoff is cancelled at once, not after it (its message sent ${where})`, async () => {
      const { w } = rateLimitedAtStep2(queueInCommit);
      await start(w.deps);
      await workVisible(w.deps, w.runtime);
      expect(await loadState(w.runtime)).toMatchObject({ status: 'running', step: 1, failures: 1 });
      // No worker holds its message while it waits: the cancel takes it and applies itself.
      expect(await cancelRun(w.deps, 'run', { by: 'ops@example.com' })).toMatchObject({ outcome: 'cancelled', idle: true });
      expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', step: 1 });
      expect(w.runtime.queue.depth()).toBe(0);
      w.runtime.close();
    });

    it(`a step that fails while a cancel is asked for sends its next message at once, not after the backoff (${where})`, async () => {
      const held = gate();
      const { w } = rateLimitedAtStep2(queueInCommit, () => held.wait());
      await start(w.deps);
      const working = workVisible(w.deps, w.runtime);
      await held.reached;
      expect(await cancelRun(w.deps, 'run', { by: 'ops@example.com' })).toMatchObject({ outcome: 'requested' });
      held.open();
      await working;
      expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', step: 1, failures: 1 });
      w.runtime.close();
    });
  }

  it('a run that steps between every look of the cancel and its write is still asked to stop', async () => {
    const { w, clock, model } = await afterStep1(20);
    // A worker stepping fast (a quick tool, an offline model): after each of the cancel's reads, a step
    // commits before its write. The request was fenced on the version read, so every try was stale, and
    // `stepwise cancel` failed with "stale write for run ...: version n is no longer the latest".
    const store = new Proxy(w.runtime.store, {
      get(target, name, receiver) {
        if (name !== 'load') return Reflect.get(target, name, receiver);
        return async (...args: Parameters<typeof target.load>) => {
          const stored = await target.load(...args);
          await advance(w.deps, 'run');
          return stored;
        };
      },
    });
    const outcome = await cancelRun({ ...w.deps, store }, 'run', { by: 'ops@example.com', reason: 'wrong table' });
    expect(outcome).toMatchObject({ outcome: 'requested', runId: 'run', version: 3 });
    expect((await w.runtime.store.load('run'))!).toMatchObject({ status: 'running', version: 3, cancelRequested: expect.stringMatching(/wrong table$/) });
    await drain(w.deps, w.runtime, clock);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled', step: 2, reason: expect.stringMatching(/^cancelled by ops@example\.com at .*: wrong table$/) });
    expect(model.stepsAsked()).toEqual([1, 2]);
    w.runtime.close();
  });

  it('a cancel whose run begins a wait between its look and its write cancels the waiting run', async () => {
    const { w, held } = heldAtApproval();
    await start(w.deps);
    await advance(w.deps, 'run');
    // The cancel reads the run running at step 1; before it writes, step 2 saves the approval wait.
    const stepping = advance(w.deps, 'run');
    await held.reached;
    let looks = 0;
    const store = new Proxy(w.runtime.store, {
      get(target, name, receiver) {
        if (name !== 'load') return Reflect.get(target, name, receiver);
        return async (...args: Parameters<typeof target.load>) => {
          const stored = await target.load(...args);
          if (looks++ === 0) {
            held.open();
            expect(await stepping).toMatchObject({ kind: 'advanced', state: { status: 'waiting' } });
          }
          return stored;
        };
      },
    });
    expect(await cancelRun({ ...w.deps, store }, 'run', { by: 'ops@example.com' })).toMatchObject({ outcome: 'cancelled', runId: 'run', version: 4 });
    expect(await loadState(w.runtime)).toMatchObject({ status: 'cancelled' });
    w.runtime.close();
  });

  it('refuses to cancel a run that ended, or one that does not exist', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(1)), clock, workerId: 'A' });
    await start(w.deps);
    await drain(w.deps, w.runtime, clock);
    await expect(cancelRun(w.deps, 'run', { by: 'ops' })).rejects.toThrow(/run run has already ended \(completed\): nothing to cancel/);
    await expect(cancelRun(w.deps, 'nobody', { by: 'ops' })).rejects.toThrow(/unknown run: nobody/);
    await expect(cancelRun(w.deps, 'run', { by: '' })).rejects.toThrow(/who cancels/);
    w.runtime.close();
  });
});
