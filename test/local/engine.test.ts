import { spawnSync } from 'node:child_process';
import { readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import {
  advance, cancelRun, defineAgent, forkRun, InvalidInputError, ModelKeyError, NewerFormatError, requestApproval, RunIdInUseError, RunIdTakenError, showRun, startRun, tool, UnknownRunError,
  waitForEvent, WrongAgentError,
  type CancelOutcome, type ForkResult, type Model, type ModelReply, type RunView,
} from '../../lib/index.ts';
import { openLocalEngine, type LocalEngine } from '../../lib/local.ts';
import { ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

/** Only the public entry points, as a program embedding stepwise would use them. */
const calls: string[] = [];
const scripted = (): Model => ({
  name: 'embedded-scripted',
  decide: async (request): Promise<ModelReply> => {
    const replies: ModelReply[] = [
      { kind: 'tool', tool: 'copy_rows', input: { table: 'orders' } },
      { kind: 'tool', tool: 'request_approval', input: { request: 'Drop the old orders table' } },
      { kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key: 'order-7' } },
    ];
    return replies[request.step - 1] ?? { kind: 'done', summary: 'copied, approved, paid' };
  },
});
const agent = defineAgent({
  name: 'embedded',
  offlineModel: scripted,
  tools: [
    tool({ name: 'copy_rows', description: 'Copy rows.', input: z.object({ table: z.string() }), sideEffect: true, run: (input, ctx) => { calls.push(ctx.idempotencyKey); return `copied ${input.table}`; } }),
    requestApproval({ approvers: ['ops@example.com'] }),
    waitForEvent({ types: ['order.paid'] }),
  ],
});

const quiet = pino({ level: 'silent' });
const cleanups: (() => void)[] = [];
afterEach(() => { for (const c of cleanups.splice(0)) c(); calls.length = 0; });
async function open(options: { model?: Model; workerId?: string } = {}): Promise<{ engine: LocalEngine; dir: string }> {
  const db = tempDb();
  const engine = await openLocalEngine(agent, { dbPath: db.path, log: quiet, ...options });
  cleanups.push(() => { engine.close(); db.cleanup(); });
  return { engine, dir: join(db.path, '..') };
}

describe('openLocalEngine: the engine embedded in a program', () => {
  it('works a run through an approval and an event to the end, each answered by the program', async () => {
    const { engine, dir } = await open();
    expect(engine.modelLabel).toBe('offline scripted model "embedded-scripted" of agent embedded, not Claude (set ANTHROPIC_API_KEY to use Claude)');
    const { runId } = await startRun(engine.deps, { goal: 'move the orders', runId: 'emb-1' });

    const steps: number[] = [];
    let now = await engine.work(runId, { onHandled: (h) => { if (h.action === 'ack' && h.outcome?.kind === 'advanced') steps.push(h.outcome.state.step); } });
    expect(now.state.status).toBe('waiting');
    expect(now.state.wait).toMatchObject({ kind: 'approval', step: 2, approvers: ['ops@example.com'], request: 'Drop the old orders table' });
    expect(steps).toEqual([1, 1]);
    // The approval email is beside the database, as for `stepwise run`.
    expect(readdirSync(join(dir, 'outbox')).filter((f) => f.endsWith('.eml'))).toHaveLength(1);

    expect(await engine.answer(runId, { decision: 'approve', comment: 'go' })).toMatchObject({ outcome: 'resumed', answer: { kind: 'approved', by: 'ops@example.com', comment: 'go' } });
    // A second answer is told the approval was answered, at the step its answer completed.
    expect(await engine.answer(runId, { decision: 'approve' })).toMatchObject({ outcome: 'already-answered', record: { step: 2, tool: 'request_approval' } });

    now = await engine.work(runId);
    expect(now.state.wait).toMatchObject({ kind: 'event', event: { type: 'order.paid', key: 'order-7' } });
    await expect(engine.answer(runId, { decision: 'reject' })).rejects.toThrow('run emb-1 waits for event order.paid/order-7, not an approval');
    await expect(engine.emit({ type: 'order.paid', key: 'order 7' })).rejects.toThrow('invalid event: key: a correlation key is 1-256 letters');
    expect(await engine.emit({ type: 'order.paid', key: 'order-7', id: 'evt-7', payload: { amount: 12 } })).toEqual({ eventId: 'evt-7', fresh: true, resumed: ['emb-1'] });
    expect(await engine.emit({ type: 'order.paid', key: 'order-7', id: 'evt-7', payload: { amount: 12 } })).toEqual({ eventId: 'evt-7', fresh: false, resumed: [] });

    now = await engine.work(runId);
    expect(now.state).toMatchObject({ status: 'completed', step: 3, summary: 'copied, approved, paid' });
    expect(now.state.steps.map((s) => s.tool)).toEqual(['copy_rows', 'request_approval', 'wait_for_event']);
    expect(JSON.parse(now.state.steps[2]!.result.text)).toMatchObject({ id: 'evt-7', payload: { amount: 12 } });
    expect(calls).toEqual(['emb-1/step-1']);
  });

  it('refuses an event payload JSON cannot hold with an InvalidInputError, and keeps nothing of it', async () => {
    const { engine } = await open();
    const event = { type: 'order.paid', key: 'order-7', id: 'evt-odd' };
    const refusal = (payload: unknown) => engine.emit({ ...event, payload }).then(() => 'kept', (error: unknown) => error);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const refused = [await refusal({ amount: 12n }), await refusal(() => 12), await refusal(Symbol('x')), await refusal(cyclic)];
    expect(refused.every((error) => error instanceof InvalidInputError)).toBe(true);
    expect(refused.map((error) => (error as Error).message)).toEqual([
      'the event payload cannot be stored as JSON (Do not know how to serialize a BigInt); pass plain data',
      'the event payload is a function, which cannot be stored as JSON; pass plain data',
      'the event payload is a symbol, which cannot be stored as JSON; pass plain data',
      'the event payload is nested deeper than 64 levels, or contains itself',
    ]);
    // Nothing was kept under the id: the same event with plain data is new.
    expect(await engine.emit({ ...event, payload: { amount: 12 } })).toMatchObject({ eventId: 'evt-odd', fresh: true });
  });

  it('checks an agent the program built without defineAgent, as `stepwise run` checks a loaded one', async () => {
    const db = tempDb();
    cleanups.push(db.cleanup);
    const copy = { name: 'copy_rows', description: 'Copy rows.', input: z.object({ table: z.string() }), run: () => 'copied' };
    await expect(openLocalEngine({ name: 'hand-built', tools: [copy] } as never, { dbPath: db.path, log: quiet }))
      .rejects.toThrow(new InvalidInputError('tool copy_rows: sideEffect must be true (it changes something: its decision is kept and it runs under an idempotency key) or false'));
    await expect(openLocalEngine({ name: 'hand-built', tools: [], settings: { budget: { dollars: 5 } } } as never, { dbPath: db.path, log: quiet }))
      .rejects.toThrow('agent hand-built: settings.budget must be { tokens?, usd? }');
    const none = openLocalEngine(undefined as never, { dbPath: db.path, log: quiet });
    await expect(none).rejects.toBeInstanceOf(InvalidInputError);
    await expect(none).rejects.toThrow('an agent is defineAgent({ name, tools }), not undefined');
  });

  it("takes the agent of a CommonJS package as a .mts program's default import gives it: the module's exports", async () => {
    // A package `npm init` made is CommonJS: its agent.ts compiles to `exports.default = ...`, and the
    // README's `import agent from './agent.ts'` in a program.mts receives `{ default: agent }`.
    const db = tempDb();
    cleanups.push(db.cleanup);
    const dir = join(db.path, '..');
    const lib = (file: string) => JSON.stringify(join(ROOT, 'lib', file));
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'cjs-app', private: true }));
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    writeFileSync(join(dir, 'agent.ts'), `import * as z from 'zod';
import { defineAgent, tool, type ModelReply } from ${lib('index.ts')};
export default defineAgent({
  name: 'cjs-agent',
  offlineModel: () => ({ name: 'cjs-scripted', decide: async (r): Promise<ModelReply> => (r.step === 1 ? { kind: 'tool', tool: 'greet', input: {} } : { kind: 'done', summary: 'greeted' }) }),
  tools: [tool({ name: 'greet', description: 'Greets.', input: z.object({}), sideEffect: false, run: () => 'hi' })],
});
`);
    writeFileSync(join(dir, 'program.mts'), `import { startRun } from ${lib('index.ts')};
import { openLocalEngine } from ${lib('local.ts')};
import agent from './agent.ts';
const engine = await openLocalEngine(agent, { dbPath: 'runs.db' });
try {
  const { runId } = await startRun(engine.deps, { goal: 'greet once', runId: 'cjs-1' });
  const { state } = await engine.work(runId);
  console.log(Object.keys(agent).join(','), state.status, state.summary);
} finally {
  engine.close();
}
`);
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'program.mts'], { cwd: dir, encoding: 'utf8', env: { ...process.env, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' } });
    // Its error's last lines (the first is the minified source line tsx shows).
    const said = r.stderr.split('\n').filter((line) => line.trim() && !/^\s+at /.test(line)).slice(-3).join('\n');
    expect({ code: r.status, out: r.stdout }, said).toEqual({ code: 0, out: 'default completed greeted\n' });
    expect(r.stderr).toBe('');
  });

  it('stops before a step when its signal is aborted, and the run continues from there on the next work', async () => {
    const { engine } = await open();
    const { runId } = await startRun(engine.deps, { goal: 'move the orders' });
    const stop = new AbortController();
    stop.abort();
    const stopped = await engine.work(runId, { signal: stop.signal });
    expect({ status: stopped.state.status, version: stopped.version, steps: stopped.state.steps.length }).toEqual({ status: 'running', version: 1, steps: 0 });
    expect((await engine.work(runId)).state).toMatchObject({ status: 'waiting', step: 1 });
    expect(calls).toHaveLength(1);
  });

  it('takes a model and a worker id from the program, and refuses an unknown run', async () => {
    const { engine, dir } = await open({ model: scripted(), workerId: 'billing-worker-7' });
    expect(engine.modelLabel).toBe('model "embedded-scripted" given by the program');
    const { runId } = await startRun(engine.deps, { goal: 'move the orders' });
    await engine.work(runId);
    // Created, step 1, waiting at step 2: every checkpoint written under the program's worker id.
    expect((await engine.runtime.store.history(runId)).map((h) => h.workerId)).toEqual(['billing-worker-7', 'billing-worker-7', 'billing-worker-7']);
    await expect(engine.work('no-such-run')).rejects.toThrow('unknown run: no-such-run');
    expect(readdirSync(join(dir, 'outbox')).filter((f) => f.endsWith('.eml'))).toHaveLength(1);
  });

  it('holds each message for the visibilityMs the program gives, else the 30 s default', async () => {
    // The tool reads its own message's lease from the file, as another worker process would see it.
    let dbPath = '';
    const leases: number[] = [];
    const leaseAgent = defineAgent({
      name: 'lease',
      offlineModel: () => ({ name: 'lease-model', decide: async (r): Promise<ModelReply> => (r.step === 1 ? { kind: 'tool', tool: 'read_lease', input: {} } : { kind: 'done', summary: 'read' }) }),
      tools: [tool({
        name: 'read_lease', description: 'Read the lease.', input: z.object({}), sideEffect: false,
        run: (_input, ctx) => {
          const db = new Database(dbPath, { readonly: true });
          try {
            const row = db.prepare('SELECT visible_at FROM queue WHERE run_id = ? AND acked_at IS NULL AND receipt IS NOT NULL').get(ctx.runId) as { visible_at: number };
            leases.push(row.visible_at - Date.now());
          } finally { db.close(); }
          return 'read';
        },
      })],
    });
    for (const visibilityMs of [600_000, undefined]) {
      const db = tempDb();
      dbPath = db.path;
      const engine = await openLocalEngine(leaseAgent, { dbPath: db.path, log: quiet });
      cleanups.push(() => { engine.close(); db.cleanup(); });
      const { runId } = await startRun(engine.deps, { goal: 'read the lease' });
      expect((await engine.work(runId, visibilityMs ? { visibilityMs } : {})).state.status).toBe('completed');
    }
    expect(leases).toHaveLength(2);
    expect(leases[0]).toBeGreaterThan(590_000);
    expect(leases[0]).toBeLessThanOrEqual(600_000);
    expect(leases[1]).toBeGreaterThan(20_000);
    expect(leases[1]).toBeLessThanOrEqual(30_000);
  });

  it('throws errors a program can tell apart by their exported classes, and types what it operates with', async () => {
    const { engine } = await open();
    // An unknown run (a 404 to a service) is not any other PermanentError.
    await expect(engine.work('no-such-run')).rejects.toBeInstanceOf(UnknownRunError);
    await expect(showRun(engine.deps, 'no-such-run')).rejects.toBeInstanceOf(UnknownRunError);
    const { runId } = await startRun(engine.deps, { goal: 'move the orders', runId: 'typed-1' });
    const other = await openLocalEngine(defineAgent({ name: 'other', tools: [] }), { dbPath: engine.runtime.db.name, log: quiet, model: scripted() });
    cleanups.unshift(() => other.close());
    await expect(startRun(other.deps, { goal: 'move the orders', runId })).rejects.toBeInstanceOf(RunIdTakenError);

    const view: RunView = await showRun(engine.deps, runId);
    const cancel: CancelOutcome = await cancelRun(engine.deps, runId, { by: 'ops@example.com' });
    // A fork under the id of a run that is not that fork (here its parent's) is refused by its own class.
    await expect(forkRun(engine.deps, runId, { fromStep: 0, runId })).rejects.toBeInstanceOf(RunIdInUseError);
    const fork: ForkResult = await forkRun(engine.deps, runId, { fromStep: 0, runId: 'typed-fork' });
    // No worker holds its message: the cancel applies itself.
    expect([view.status, cancel.outcome, fork.created]).toEqual(['running', 'cancelled', true]);

    // A Model of the program's own says its key was refused as Claude's adapter does: the step waits for
    // a valid key, counting no failure.
    const refused = await openLocalEngine(agent, { dbPath: engine.runtime.db.name, log: quiet, model: { name: 'keyed', decide: async () => { throw new ModelKeyError('key revoked'); } } });
    cleanups.unshift(() => refused.close());
    await expect(advance(refused.deps, 'typed-fork')).rejects.toBeInstanceOf(ModelKeyError);
    expect(await refused.runtime.store.load('typed-fork')).toMatchObject({ status: 'running', version: 1 });
  });

  it("refuses to work a run it can never step, another agent's or one newer code wrote, where it waited for good", async () => {
    const { engine } = await open();
    const other = await openLocalEngine(defineAgent({ name: 'other', tools: [] }), { dbPath: engine.runtime.db.name, log: quiet, model: scripted() });
    cleanups.unshift(() => other.close());
    await startRun(other.deps, { goal: 'tidy up', runId: 'others-1' });
    const { runId } = await startRun(engine.deps, { goal: 'move the orders', runId: 'newer-1' });
    engine.runtime.db.prepare("UPDATE checkpoints SET head = json_set(head, '$.formatVersion', 99) WHERE run_id = ?").run(runId);

    const wrong = await engine.work('others-1').catch((error: unknown) => error);
    expect(wrong).toBeInstanceOf(WrongAgentError);
    expect((wrong as Error).message).toBe('run others-1 belongs to agent "other" but this worker runs agent "embedded"');
    await expect(engine.work(runId)).rejects.toBeInstanceOf(NewerFormatError);
    // Neither run's message was taken: their own workers find them as they were.
    const received = engine.runtime.db.prepare('SELECT run_id, receive_count FROM queue ORDER BY run_id').all();
    expect(received).toEqual([{ run_id: 'newer-1', receive_count: 0 }, { run_id: 'others-1', receive_count: 0 }]);
    expect((await other.work('others-1')).state.status).toBe('completed');
  });

  it("refuses an approval answer whose decision is neither approve nor reject, where it was read as a rejection", async () => {
    const { engine } = await open();
    const { runId } = await startRun(engine.deps, { goal: 'move the orders' });
    const waiting = await engine.work(runId);
    expect(waiting.state.wait?.kind).toBe('approval');
    // A service handing on a request body as it came: untyped, so the compiler cannot catch it.
    const body = JSON.parse('{"decision":"approved","by":"ops@example.com","comment":{"text":"fine"}}') as Parameters<LocalEngine['answer']>[1];
    const refusal = (input: Record<string, unknown>) => engine.answer(runId, { ...body, ...input }).then((outcome) => outcome, (error: unknown) => error);
    const refused = [await refusal({ comment: 'fine' }), await refusal({ decision: undefined }), await refusal({ decision: 'approve', by: 7 }), await refusal({ decision: 'approve' })];
    expect(refused.every((error) => error instanceof InvalidInputError)).toBe(true);
    expect(refused.map((error) => (error as Error).message)).toEqual([
      'an approval\'s decision is "approve" or "reject", not "approved"',
      'an approval\'s decision is "approve" or "reject", not undefined',
      'an approval\'s by is the approver\'s email, not a number',
      'an approval\'s comment is text, not an object',
    ]);
    expect(await engine.runtime.store.load(runId)).toMatchObject({ status: 'waiting', version: waiting.version });
    expect(await engine.answer(runId, { decision: 'approve', by: 'ops@example.com' })).toMatchObject({ outcome: 'resumed', answer: { kind: 'approved' } });
  });

  it('refuses a run id or goal of another type than text, where a number made a run no worker could read', async () => {
    const { engine } = await open();
    // Values a program passes on untyped (a parsed request, a JavaScript caller): the compiler never sees them.
    const refusal = (input: Record<string, unknown>) => startRun(engine.deps, { goal: 'move the orders', ...input } as never).then((started) => started, (error: unknown) => error);
    const refused = [await refusal({ runId: 5 }), await refusal({ goal: 42 })];
    expect(refused.every((error) => error instanceof InvalidInputError)).toBe(true);
    expect(refused.map((error) => (error as Error).message)).toEqual([
      'run id must be text matching /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, not a number',
      'the goal is text that says what the run should achieve, not a number',
    ]);
    expect(await engine.runtime.store.list()).toEqual([]);
    const { runId } = await startRun(engine.deps, { goal: 'move the orders' });
    await expect(forkRun(engine.deps, runId, { fromStep: 0, runId: 7 } as never)).rejects.toThrow('run id must be text');
    expect((await engine.runtime.store.list()).map((r) => r.runId)).toEqual([runId]);
  });

  it('refuses a cancel that does not say who cancels with an InvalidInputError, where it threw a TypeError', async () => {
    const { engine } = await open();
    const { runId } = await startRun(engine.deps, { goal: 'move the orders' });
    const refusal = (input: Record<string, unknown>) => cancelRun(engine.deps, runId, input as never).then((outcome) => outcome, (error: unknown) => error);
    const refused = [await refusal({}), await refusal({ by: 7 }), await refusal({ by: 'ops@example.com', reason: 7 })];
    expect(refused.every((error) => error instanceof InvalidInputError)).toBe(true);
    expect(refused.map((error) => (error as Error).message)).toEqual([
      'say who cancels (--as, or "by" in the API and cancelRun): 1 to 254 characters',
      'say who cancels (--as, or "by" in the API and cancelRun): 1 to 254 characters',
      'the reason is text, not a number',
    ]);
    expect(await engine.runtime.store.load(runId)).not.toHaveProperty('cancelRequested');
  });
});
