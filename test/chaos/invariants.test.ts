import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { PermanentError } from '../../lib/core/errors.ts';
import { checkInvariants, ungatedEffects, type RunExpectation } from '../../bench/chaos/invariants.ts';
import type { StepRecord } from '../../lib/core/state.ts';
import { ManualClock, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';
import { workVisible } from '../support/queue-work.ts';
import { APPROVER } from '../support/wait-agent.ts';
import { answerWait } from '../../lib/waits/answer.ts';
import { requestApproval } from '../../lib/waits/tools.ts';
import { pruneCheckpointRow } from '../support/local-records.ts';

const toolOf = () => 'write_row';

/** A clean 3-step run on a real SQLite runtime, with the applications its tool made; `output` is step n's tool output. */
async function cleanRun(db: ReturnType<typeof tempDb>, output: (n: number) => unknown = (n) => ({ n })) {
  const applied = new Map<string, number>();
  const agent = defineAgent({
    name: 'inv', tools: [tool({
      name: 'write_row', description: 'w', input: z.object({ n: z.number().int() }), sideEffect: true,
      run: (input, ctx) => { applied.set(ctx.idempotencyKey, (applied.get(ctx.idempotencyKey) ?? 0) + 1); return output(input.n); },
    })],
  });
  const model = new StubModel((n) => (n <= 3 ? { kind: 'tool', tool: 'write_row', input: { n } } : { kind: 'done', summary: 'done' }));
  const clock = new ManualClock();
  const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
  await start(w.deps, 'go', 'run');
  await drain(w.deps, w.runtime, clock);
  const runs: RunExpectation[] = [{ runId: 'run', steps: 3, toolOf }];
  return { applied, runtime: w.runtime, runs };
}

/** Step records as far as the gate rule reads them. */
const record = (step: number, tool: string, input: unknown, text: string, waitId?: string) =>
  ({ step, tool, input, result: { ok: true, text }, ...(waitId ? { waitId } : {}) }) as unknown as StepRecord;
const APPROVED = '{"approval":"approved","by":"ops@example.com","at":"2026-12-07T08:00:00.000Z"}';
const REJECTED = '{"approval":"rejected","by":"ops@example.com","at":"2026-12-07T08:00:00.000Z"}';

describe('the chaos invariants: a gated effect follows an approval of its very call', () => {
  const gated = new Map([['run/step-3', 'gated_row']]);

  it('passes an effect applied at the step after its call was approved, as approved, recorded or not yet', () => {
    const steps = [record(1, 'write_row', { n: 1 }, '{}'), record(2, 'gated_row', { n: 3 }, APPROVED, 'w1'), record(3, 'gated_row', { n: 3 }, '{"n":3}')];
    expect(ungatedEffects('run', steps, gated)).toEqual([]);
    expect(ungatedEffects('run', steps.slice(0, 2), gated)).toEqual([]);
    // Another run's key is not this run's.
    expect(ungatedEffects('other', [], gated)).toEqual([]);
  });

  it('flags one applied after a rejection, with no gate before it, or other than the call approved', () => {
    expect(ungatedEffects('run', [record(1, 'write_row', { n: 1 }, '{}'), record(2, 'gated_row', { n: 3 }, REJECTED, 'w1')], gated))
      .toEqual([expect.stringMatching(/^gated_row applied under run\/step-3 without an approval at step 2 \(gated_row: \{"approval":"rejected"/)]);
    expect(ungatedEffects('run', [record(1, 'write_row', { n: 1 }, '{}'), record(2, 'write_row', { n: 2 }, '{}')], gated))
      .toEqual([expect.stringMatching(/without an approval at step 2 \(write_row/)]);
    expect(ungatedEffects('run', [record(1, 'write_row', { n: 1 }, '{}')], gated)).toEqual([expect.stringMatching(/at step 2 \(no record\)/)]);
    expect(ungatedEffects('run', [record(1, 'write_row', { n: 1 }, '{}'), record(2, 'gated_row', { n: 3 }, APPROVED, 'w1'), record(3, 'gated_row', { n: 4 }, '{"n":4}')], gated))
      .toEqual(['step 3 ran gated_row({"n":4}), not the call approved at step 2: gated_row({"n":3})']);
  });
});

describe('the chaos invariants', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());
  const injected = (reason: string) => reason.includes('injected');

  it('a clean run passes', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    const verdict = await checkInvariants({ store: runtime.store, runs, applied, injected });
    expect(verdict.violations).toEqual([]);
    expect(verdict).toMatchObject({ completed: 1, completedSteps: 3, appliedTwice: 0, stepsLost: 0, stuck: 0 });
    runtime.close();
  });

  it('reads back every output stored by reference, and flags one missing or cut short', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db, (n) => ({ n, log: 'x'.repeat(5_000 + n) }));
    const clean = await checkInvariants({ store: runtime.store, runs, applied, injected, blobs: runtime.blobs });
    expect(clean.violations).toEqual([]);
    expect(clean.blobsChecked).toBe(3);
    const steps = decodeState((await runtime.store.load('run'))!).steps;
    const [first, second] = steps.map((s) => s.result.ref!);
    runtime.db.prepare('DELETE FROM blobs WHERE ref = ?').run(first);
    runtime.db.prepare('UPDATE blobs SET data = ?, encoding = NULL WHERE ref = ?').run(Buffer.from('short'), second);
    const broken = await checkInvariants({ store: runtime.store, runs, applied, injected, blobs: runtime.blobs });
    expect(broken.blobsChecked).toBe(1);
    expect(broken.violations.map((v) => [v.kind, v.detail])).toEqual([
      ['blob', `step 1's output ${first} is missing`],
      ['blob', `step 2's output ${second} is 5 bytes, not ${steps[1]!.result.bytes}`],
    ]);
    runtime.close();
  });

  it('flags an effect applied twice, a completed step never applied, and an effect no completed step has', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    applied.set('run/step-1', 2);
    applied.delete('run/step-2');
    applied.set('run/step-9', 1);
    const verdict = await checkInvariants({ store: runtime.store, runs, applied, injected });
    expect(verdict.appliedTwice).toBe(1);
    expect(verdict.stepsLost).toBe(1);
    expect(verdict.violations.map((v) => v.kind).sort()).toEqual(['applied-twice', 'phantom-effect', 'step-lost']);
    runtime.close();
  });

  it('flags a version missing from the history and a skipped step', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    // The row goes, its step's record kept (where a pruned row's goes): only the history shows the gap.
    pruneCheckpointRow(runtime.db, 'run', 3);
    const verdict = await checkInvariants({ store: runtime.store, runs: [{ ...runs[0]!, steps: 4 }], applied, injected });
    expect(verdict.violations.map((v) => v.kind)).toEqual(expect.arrayContaining(['history', 'incomplete']));
    expect(verdict.stepsLost).toBe(1);
    runtime.close();
  });

  it('flags a checkpoint row lost with its step record as an unreadable run, a step lost, rather than stopping the check', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    runtime.db.prepare('DELETE FROM checkpoints WHERE run_id = ? AND version = 3').run('run');
    const verdict = await checkInvariants({ store: runtime.store, runs, applied, injected });
    expect(verdict.violations).toEqual([expect.objectContaining({ runId: 'run', kind: 'unreadable', detail: expect.stringMatching(/head says \d+ steps, found \d+/) })]);
    expect(verdict.stepsLost).toBe(1);
    runtime.close();
  });

  it('flags a step that did something other than its own work (a repeated step)', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    const verdict = await checkInvariants({ store: runtime.store, runs: [{ ...runs[0]!, toolOf: (n) => (n === 2 ? 'notify' : 'write_row') }], applied, injected });
    expect(verdict.violations.map((v) => v.kind)).toEqual(['steps']);
    runtime.close();
  });

  it('flags a run left running with nothing to move it, and a run failed for a fault nobody injected', async () => {
    db = tempDb();
    const { applied, runtime, runs } = await cleanRun(db);
    const clock = new ManualClock();
    const failing = new StubModel(() => { throw new PermanentError('disk full'); });
    const w = workerProcess({ dbPath: db.path, agent: defineAgent({ name: 'inv', tools: [] }), model: failing, clock, workerId: 'B' });
    // 'lost': its first message is consumed without a step, so nothing will ever move it.
    await start(w.deps, 'go', 'lost');
    const [message] = await w.runtime.queue.receive();
    await w.runtime.queue.ack(message!);
    await start(w.deps, 'go', 'broken');
    await drain(w.deps, w.runtime, clock);
    const verdict = await checkInvariants({
      store: runtime.store, runs: [...runs, { runId: 'lost', steps: 3, toolOf }, { runId: 'broken', steps: 3, toolOf }], applied, injected,
    });
    expect(verdict.stuck).toBe(1);
    expect(verdict.violations.map((v) => [v.runId, v.kind])).toEqual([['lost', 'stuck'], ['broken', 'reason']]);
    w.runtime.close(); runtime.close();
  });
});

/** A run on SQLite whose step 1 writes a row and step 2 waits for approval (1 hour), worked until it waits. */
async function waitingRun(db: ReturnType<typeof tempDb>, then: (step: number, prompt: string) => ReturnType<StubModel['decide']> extends Promise<infer R> ? R : never) {
  const applied = new Map<string, number>();
  const agent = defineAgent({
    name: 'inv', tools: [tool({
      name: 'write_row', description: 'w', input: z.object({ n: z.number().int() }), sideEffect: true,
      run: (input, ctx) => { applied.set(ctx.idempotencyKey, (applied.get(ctx.idempotencyKey) ?? 0) + 1); return input; },
    }), requestApproval({ approvers: [APPROVER], timeoutMs: 3_600_000 })],
  });
  const model = new StubModel((n, prompt) => (n === 1 ? { kind: 'tool', tool: 'write_row', input: { n } }
    : n === 2 ? { kind: 'tool', tool: 'request_approval', input: { request: 'go on?' } } : then(n, prompt)));
  const clock = new ManualClock();
  const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A' });
  await start(w.deps, 'go', 'run');
  await workVisible(w.deps, w.runtime);
  const waitToolOf = (n: number) => (n === 2 ? 'request_approval' : 'write_row');
  return { applied, clock, w, waitToolOf };
}

describe('the chaos invariants, for waits', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());
  const injected = (reason: string) => reason.includes('injected');

  it('an approved wait passes; its step is the wait tool\'s', async () => {
    db = tempDb();
    const { applied, clock, w, waitToolOf } = await waitingRun(db, (n) => (n <= 3 ? { kind: 'tool', tool: 'write_row', input: { n } } : { kind: 'done', summary: 'ok' }));
    const waitId = decodeState((await w.runtime.store.load('run'))!).wait!.id;
    expect(await answerWait(w.deps, { runId: 'run', waitId, answer: { kind: 'approved', by: APPROVER } })).toMatchObject({ outcome: 'resumed' });
    await drain(w.deps, w.runtime, clock);
    const verdict = await checkInvariants({
      store: w.runtime.store, runs: [{ runId: 'run', steps: 3, toolOf: waitToolOf }], applied, injected,
      answers: new Map([[`run/${waitId}`, 1]]), now: clock.now(),
    });
    expect(verdict.violations).toEqual([]);
    expect(verdict).toMatchObject({ completed: 1, timedOut: 0, waitsTwice: 0 });
    w.runtime.close();
  });

  it('flags a wait resolved twice: two step records of one wait (a fabricated history), or two answers that each resumed it', async () => {
    db = tempDb();
    const { applied, clock, w } = await waitingRun(db, (n) => (n === 3 ? { kind: 'tool', tool: 'request_approval', input: { request: 'again?' } } : { kind: 'done', summary: 'ok' }));
    const first = decodeState((await w.runtime.store.load('run'))!).wait!.id;
    await answerWait(w.deps, { runId: 'run', waitId: first, answer: { kind: 'approved', by: APPROVER } });
    await workVisible(w.deps, w.runtime);
    const second = decodeState((await w.runtime.store.load('run'))!).wait!.id;
    await answerWait(w.deps, { runId: 'run', waitId: second, answer: { kind: 'approved', by: APPROVER } });
    await drain(w.deps, w.runtime, clock);
    // What a second resume of the first wait, had it got past the version fence, would have stored: step 3
    // completing wait `first` again.
    const store = {
      load: async (runId: string) => {
        const stored = (await w.runtime.store.load(runId))!;
        const steps = stored.steps.map((text, i) => (i === 2 ? text.replace(second, first) : text));
        return { ...stored, steps };
      },
      history: (runId: string) => w.runtime.store.history(runId),
    };
    const runs = [{ runId: 'run', steps: 3, toolOf: (n: number) => (n === 1 ? 'write_row' : 'request_approval') }];
    const stored = await checkInvariants({ store, runs, applied, injected, now: clock.now() });
    expect(stored.violations.map((v) => v.kind)).toEqual(['wait-twice']);
    expect(stored.waitsTwice).toBe(1);
    // The same run as stored, but the schedule saw two answers both report that they resumed wait `first`.
    const reported = await checkInvariants({ store: w.runtime.store, runs, applied, injected, answers: new Map([[`run/${first}`, 2], [`run/${second}`, 1]]), now: clock.now() });
    expect(reported.violations.map((v) => [v.kind, v.detail])).toEqual([['wait-twice', `run/${first} resolved 2 times`]]);
    w.runtime.close();
  });

  it('flags a run left waiting past its deadline with nothing to move it', async () => {
    db = tempDb();
    const { applied, clock, w, waitToolOf } = await waitingRun(db, () => ({ kind: 'done', summary: 'ok' }));
    const runs = [{ runId: 'run', steps: 3, toolOf: waitToolOf }];
    const verdict = await checkInvariants({ store: w.runtime.store, runs, applied, injected, now: clock.now() + 3_600_000 });
    expect(verdict.stuck).toBe(1);
    expect(verdict.violations).toMatchObject([{ runId: 'run', kind: 'stuck', detail: expect.stringMatching(/past its deadline/) }]);
    w.runtime.close();
  });

  it('a run that took its wait\'s timeout branch counts as timed out, and is flagged unless the timeout was injected', async () => {
    db = tempDb();
    const { applied, clock, w, waitToolOf } = await waitingRun(db, (n, prompt) => (prompt.includes('"timedOut":true') ? { kind: 'done', summary: 'nobody answered' } : { kind: 'tool', tool: 'write_row', input: { n } }));
    clock.advance(3_600_000);
    await drain(w.deps, w.runtime, clock);
    expect(decodeState((await w.runtime.store.load('run'))!)).toMatchObject({ status: 'completed', step: 2 });
    const runs = [{ runId: 'run', steps: 3, toolOf: waitToolOf }];
    const ok = await checkInvariants({ store: w.runtime.store, runs, applied, injected: (reason) => reason === 'run: its wait timed out', now: clock.now() });
    expect(ok.violations).toEqual([]);
    expect(ok).toMatchObject({ completed: 0, timedOut: 1, stepsLost: 0 });
    const bad = await checkInvariants({ store: w.runtime.store, runs, applied, injected, now: clock.now() });
    expect(bad.violations.map((v) => v.kind)).toEqual(['reason']);
    w.runtime.close();
  });
});
