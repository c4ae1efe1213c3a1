import { afterEach, describe, expect, it } from 'vitest';
import { advance } from '../../lib/engine/advance.ts';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { showRun } from '../../lib/engine/operate/show.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { workVisible } from '../support/queue-work.ts';
import { ApprovalFlowModel, waitAgent } from '../support/wait-agent.ts';

describe('fork', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  function setup(rows = new FakeRows(), script = writeRowsScript(5)) {
    db = tempDb();
    const clock = new ManualClock();
    const agent = rowsAgent(rows);
    const a = workerProcess({ dbPath: db.path, agent, model: new StubModel(script), clock, workerId: 'A' });
    return { rows, clock, agent, a };
  }

  it('from step k: nothing before k is replayed, the fork\'s effects use its own keys, the parent is unchanged', async () => {
    const { rows, clock, agent, a } = setup();
    await start(a.deps);
    await drain(a.deps, a.runtime, clock);
    const parent = await loadState(a.runtime);
    expect(parent).toMatchObject({ status: 'completed', step: 5 });
    const parentStored = await a.runtime.store.load('run');
    const parentHistory = await a.runtime.store.history('run');

    const forked = await forkRun(a.deps, 'run', { fromStep: 2, runId: 'run-b' });
    expect(forked).toMatchObject({ runId: 'run-b', created: true, version: 1, forkedFrom: { runId: 'run', step: 2, version: parentStored!.version } });
    const model = new StubModel(writeRowsScript(5));
    const b = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'B' });
    await drain(b.deps, b.runtime, clock);

    const fork = await loadState(b.runtime, 'run-b');
    expect(fork).toMatchObject({ status: 'completed', step: 5, goal: parent.goal, forkedFrom: { runId: 'run', step: 2 } });
    // Its first two steps are the parent's, as records of its own; the rest it did itself.
    expect(fork.steps.slice(0, 2)).toEqual(parent.steps.slice(0, 2));
    expect(fork.steps.slice(2).map((s) => [s.idempotencyKey, s.workerId])).toEqual([['run-b/step-3', 'B'], ['run-b/step-4', 'B'], ['run-b/step-5', 'B']]);
    // Nothing before step 3 was asked for or applied again.
    expect(model.stepsAsked()).toEqual([3, 4, 5, 6]);
    expect(rows.received).toEqual(['run/step-1', 'run/step-2', 'run/step-3', 'run/step-4', 'run/step-5', 'run-b/step-3', 'run-b/step-4', 'run-b/step-5']);
    // The fork's usage starts from the two copied steps'.
    expect(fork.usage.inputTokens).toBe(500);
    // The parent is exactly as it was.
    expect(await a.runtime.store.load('run')).toEqual(parentStored);
    expect(await a.runtime.store.history('run')).toEqual(parentHistory);
    const forkHistory = await b.runtime.store.history('run-b');
    expect(forkHistory[0]).toMatchObject({ version: 1, step: 2, status: 'running' });
    a.runtime.close(); b.runtime.close();
  });

  it('a worker holding the parent\'s steps never mixes them into the fork, or the fork\'s into the parent', async () => {
    const { clock, a } = setup();
    await start(a.deps);
    for (let i = 0; i < 3; i++) await advance(a.deps, 'run');
    // A holds the parent's three steps; the fork from step 1 has one, then its own.
    await forkRun(a.deps, 'run', { fromStep: 1, runId: 'run-f', goal: 'write the rows again, differently' });
    const model = a.deps.model as StubModel;
    await advance(a.deps, 'run-f');
    await advance(a.deps, 'run');
    const [forkAsk, parentAsk] = model.requests.slice(-2);
    expect(forkAsk!.step).toBe(2);
    expect(forkAsk!.prompt).toContain('write the rows again, differently');
    expect(forkAsk!.prompt.match(/^\d+\. write_row/gm)).toHaveLength(1);
    expect(parentAsk!.step).toBe(4);
    expect(parentAsk!.prompt.match(/^\d+\. write_row/gm)).toHaveLength(3);
    expect((await loadState(a.runtime, 'run-f')).steps.map((s) => s.idempotencyKey)).toEqual(['run/step-1', 'run-f/step-2']);
    expect((await loadState(a.runtime, 'run')).steps.map((s) => s.idempotencyKey)).toEqual(['run/step-1', 'run/step-2', 'run/step-3', 'run/step-4']);
    void clock;
    a.runtime.close();
  });

  it('from a waiting run: the wait is not copied and the fork runs on its own', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const w = workerProcess({ dbPath: db.path, agent: waitAgent(rows, []), model: new ApprovalFlowModel(), clock, workerId: 'A' });
    await start(w.deps);
    await workVisible(w.deps, w.runtime);
    expect((await loadState(w.runtime)).status).toBe('waiting');
    // Step 2 is the one `status` and `show` say it waits at: it has no result yet, and is named as the wait.
    const atWait = 'step 2 of run run has no result yet: the run waits there for approval by ops@example.com; its last completed step is 1, and a fork from step 1 asks the model again there';
    await expect(forkRun(w.deps, 'run', { fromStep: 2 })).rejects.toThrow(atWait);
    await expect(showRun(w.runtime, 'run', { step: 2 })).rejects.toThrow(atWait);
    expect((await w.runtime.store.list()).map((r) => r.runId)).toEqual(['run']);
    const forked = await forkRun(w.deps, 'run', { fromStep: 1 });
    expect(forked.runId).toMatch(/^run-fork-1-[a-z0-9]{6}$/);
    const fork = await loadState(w.runtime, forked.runId);
    expect(fork).toMatchObject({ status: 'running', step: 1, failures: 0 });
    expect(fork.wait).toBeUndefined();
    await workVisible(w.deps, w.runtime);
    // The fork asked for its own approval: its own wait, under its own run.
    const waiting = await loadState(w.runtime, forked.runId);
    expect(waiting).toMatchObject({ status: 'waiting', wait: { step: 2 } });
    expect(waiting.wait!.id).not.toBe((await loadState(w.runtime)).wait!.id);
    w.runtime.close();
  });

  it('refuses what cannot be forked, clearly, and changes nothing', async () => {
    // Replies that name their model, as Claude's do: the dollar budgets below are priced by it.
    const { clock, a } = setup(new FakeRows(), (step) => ({ ...writeRowsScript(5)(step), model: 'claude-opus-5-5' }));
    await start(a.deps);
    await advance(a.deps, 'run');
    await expect(forkRun(a.deps, 'run', { fromStep: 2 })).rejects.toThrow('run run has 1 completed step; there is no step 2');
    await expect(forkRun(a.deps, 'run', { fromStep: -1 })).rejects.toThrow(/whole number/);
    await expect(forkRun(a.deps, 'nobody', { fromStep: 0 })).rejects.toThrow(/unknown run: nobody/);
    await expect(forkRun(a.deps, 'run', { fromStep: 1, runId: 'bad id!' })).rejects.toThrow(/must match/);
    await expect(forkRun(a.deps, 'run', { fromStep: 1, goal: '  ' })).rejects.toThrow(/goal is empty/);
    await expect(forkRun(a.deps, 'run', { fromStep: 1, runId: 'run' })).rejects.toThrow(/run run already exists/);
    // A cap that leaves the fork no step of its own: it would pay for one model call to end capped.
    await expect(forkRun(a.deps, 'run', { fromStep: 1, stepCap: 1 })).rejects.toThrow('a step cap of 1 leaves a fork from step 1 of run run no step to take: give it a step cap above 1');
    // A budget its copied step has already spent (120 tokens, priced as Opus 5.5: $0.0008): the fork would
    // only stop as over-budget at its first step, as a retry with it would.
    // Said for the API's callers too, who give a budget in the body, not with flags.
    await expect(forkRun(a.deps, 'run', { fromStep: 1, budget: { tokens: 120 } })).rejects.toThrow(
      'a fork of run run from step 1 would stop at once: token budget of 120 reached: 120 tokens used; give it a budget above that with --budget-tokens or --budget-usd (in the API, "budget": {"tokens", "usd"}; in the inspector, the token or dollar budget)');
    await expect(forkRun(a.deps, 'run', { fromStep: 1, budget: { usd: 0.0008 } })).rejects.toThrow(/dollar budget of \$0.0008 reached/);
    expect((await a.runtime.store.list()).map((r) => r.runId)).toEqual(['run']);
    // The same fork again is recognised and changes nothing.
    const first = await forkRun(a.deps, 'run', { fromStep: 1, runId: 'run-x', budget: { tokens: 121, usd: 0.0009 } });
    const again = await forkRun(a.deps, 'run', { fromStep: 1, runId: 'run-x', budget: { tokens: 121, usd: 0.0009 } });
    expect(first.created).toBe(true);
    expect(again).toMatchObject({ created: false, runId: 'run-x', version: 1 });
    expect((await a.runtime.store.list()).map((r) => r.runId).sort()).toEqual(['run', 'run-x']);
    void clock;
    a.runtime.close();
  });
});
