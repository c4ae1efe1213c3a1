import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, toolSpecs, type AgentDefinition } from '../../lib/agent.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { WaitRequest } from '../../lib/core/waits.ts';
import { approvalPage } from '../../lib/http/pages.ts';
import { findDrift } from '../../lib/engine/drift.ts';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { answerWait } from '../../lib/waits/answer.ts';
import { ManualClock, SimulatedCrash, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { StubModel } from '../support/stub-model.ts';

/**
 * A tool a person approves each call of (ToolDefinition.approval): the engine asks, for the call the model
 * made, and runs that call only on an approval. The model here is one a tool's output talked round: at
 * every step it asks to drop a table, and after the first it asks to drop everything.
 */
const APPROVER = 'ops@example.com';
const USAGE = { inputTokens: 100, outputTokens: 20, cacheWriteTokens: 0, cacheReadTokens: 0 };
let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

function gateAgent(dropped: string[], extra: Partial<Parameters<typeof tool>[0]> = {}): AgentDefinition {
  return defineAgent({
    name: 'gated',
    settings: { stepCap: 10 },
    tools: [
      tool({
        name: 'drop_table', description: 'Drop a table', input: z.object({ table: z.string() }), sideEffect: true,
        approval: { approvers: [APPROVER] },
        run: async ({ table }, ctx) => ctx.once(() => { dropped.push(table); return { dropped: table }; }),
        ...extra,
      }),
    ],
  });
}

/** Drops old_rows at step 1; asked again later, it goes for everything; DONE once a drop has run. */
const injected = (step: number, prompt: string): ModelReply => {
  if (/drop_table \{"table":"[a-z_]+"\} -> ok: \{"dropped"/.test(prompt)) return { kind: 'done', summary: 'dropped', usage: USAGE };
  return { kind: 'tool', tool: 'drop_table', input: { table: step === 1 ? 'old_rows' : 'everything' }, usage: USAGE };
};

function setup(agent = gateAgent([]), script = injected) {
  db = tempDb();
  const clock = new ManualClock();
  const model = new StubModel(script);
  return { ...workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' }), clock, model };
}

describe('a tool with approval', () => {
  it('a call waits for the approver, naming the tool and its arguments, and does not run', async () => {
    const dropped: string[] = [];
    const { deps, runtime, model } = setup(gateAgent(dropped));
    await start(deps);
    await workVisible(deps, runtime);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'waiting', step: 0, wait: { kind: 'approval', step: 1, tool: 'drop_table', input: { table: 'old_rows' }, approvers: [APPROVER] } });
    expect(state.wait!.request).toBe('Run drop_table (Drop a table) with these arguments:\n{\n  "table": "old_rows"\n}');
    expect(dropped).toEqual([]);
    expect(model.requests).toHaveLength(1);
    // The model is told, so that it reads the answer as its call's.
    expect(toolSpecs(deps.agent)[0]!.description).toMatch(/^Drop a table \(A person approves each call of this tool before it runs/);
  });

  it('approved: that very call runs at the next step, under its key, without asking the model; then the model goes on', async () => {
    const dropped: string[] = [];
    const { deps, runtime, model } = setup(gateAgent(dropped));
    await start(deps);
    await workVisible(deps, runtime);
    const { wait } = await loadState(runtime);
    expect(await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } })).toMatchObject({ outcome: 'resumed' });
    await workVisible(deps, runtime);
    const state = await loadState(runtime);
    expect(state).toMatchObject({ status: 'completed', step: 2 });
    expect(dropped).toEqual(['old_rows']);
    expect(state.steps[0]).toMatchObject({ step: 1, tool: 'drop_table', input: { table: 'old_rows' }, waitId: wait!.id, result: { ok: true, text: expect.stringMatching(/^\{"approval":"approved"/) } });
    expect(state.steps[1]).toMatchObject({ step: 2, tool: 'drop_table', input: { table: 'old_rows' }, idempotencyKey: 'run/step-2', result: { ok: true, text: '{"dropped":"old_rows"}' } });
    expect(state.steps[1]!.waitId).toBeUndefined();
    // Asked at step 1 and at step 3 (DONE): never at step 2, where it would have asked for everything.
    expect(model.stepsAsked()).toEqual([1, 3]);
    // The model's one call was counted once: the approval's step carries it, the approved run none.
    expect(state.usage.inputTokens).toBe(200);
  });

  it('rejected or timed out: the call never runs; the model sees the answer, and its next call waits again', async () => {
    for (const answer of ['rejected', 'timed-out'] as const) {
      const dropped: string[] = [];
      const { deps, runtime, model, clock } = setup(gateAgent(dropped));
      await start(deps);
      await workVisible(deps, runtime);
      const { wait } = await loadState(runtime);
      if (answer === 'rejected') await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'rejected', by: APPROVER, comment: 'not today' } });
      else {
        clock.ms = wait!.deadline;
        await workVisible(deps, runtime);
      }
      await workVisible(deps, runtime);
      const state = await loadState(runtime);
      expect(dropped, answer).toEqual([]);
      expect(state.steps[0]!.result, answer).toMatchObject({ ok: false });
      // Asked again, the model that goes for everything only gets a new question to the approver.
      expect(model.stepsAsked(), answer).toEqual([1, 2]);
      expect(model.requests[1]!.prompt, answer).toContain(answer === 'rejected' ? '"approval":"rejected"' : '"timedOut":true');
      expect(state, answer).toMatchObject({ status: 'waiting', step: 1, wait: { step: 2, tool: 'drop_table', input: { table: 'everything' } } });
      runtime.close();
      db.cleanup();
    }
  });

  it('a fork from the approval does not inherit it: the fork\'s call is approved anew', async () => {
    const dropped: string[] = [];
    const { deps, runtime, model } = setup(gateAgent(dropped));
    await start(deps);
    await workVisible(deps, runtime);
    const { wait } = await loadState(runtime);
    await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } });
    // Forked at the approved step, before its call ran, with another goal: the fork names the approval it copied.
    expect(await forkRun(deps, 'run', { fromStep: 1, runId: 'fork', goal: 'drop everything' })).toMatchObject({ created: true, approvals: [{ step: 1, tool: 'drop_table', by: APPROVER }] });
    await workVisible(deps, runtime);
    expect(dropped).toEqual(['old_rows']);
    const fork = await loadState(runtime, 'fork');
    expect(fork).toMatchObject({ status: 'waiting', step: 1, wait: { step: 2, tool: 'drop_table', input: { table: 'everything' } } });
    expect(model.requests.filter((r) => r.prompt.includes('<goal>drop everything</goal>'))).toHaveLength(1);
  });

  it('approved at the step cap: the run is capped, and a retry with a higher cap runs the approved call', async () => {
    const dropped: string[] = [];
    const agent = defineAgent({ ...gateAgent(dropped), settings: { stepCap: 1 } });
    const { deps, runtime, model } = setup(agent);
    await start(deps);
    await workVisible(deps, runtime);
    const { wait } = await loadState(runtime);
    await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } });
    await workVisible(deps, runtime);
    expect(await loadState(runtime)).toMatchObject({ status: 'capped', step: 1 });
    expect(dropped).toEqual([]);
    await retryRun(deps, 'run', { stepCap: 5 });
    await workVisible(deps, runtime);
    expect(dropped).toEqual(['old_rows']);
    expect(model.stepsAsked()).toEqual([1, 3]);
  });

  it('a tool with approval that itself returns a wait fails the run, naming why: its answer would read as an approval', async () => {
    const agent = gateAgent([], { sideEffect: false, run: () => new WaitRequest({ kind: 'approval', approvers: [APPROVER], request: 'me again' }) });
    const { deps, runtime } = setup(agent);
    await start(deps);
    await workVisible(deps, runtime);
    const { wait } = await loadState(runtime);
    await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } });
    await workVisible(deps, runtime);
    expect(await loadState(runtime)).toMatchObject({ status: 'failed', reason: 'step 2: tool drop_table needs approval, so it may not itself wait (it returned a wait request): wait in another tool' });
  });

  it('an approval that could never be asked is refused when the agent loads, naming the tool', () => {
    const bad: [unknown, string][] = [
      [{ approvers: [] }, 'tool drop_table: approval needs at least one approver (approvers: ["ops@example.com"])'],
      [{ approvers: ['ops'] }, 'tool drop_table: approval: approver "ops" is not an email address'],
      [{ approvers: [undefined] }, 'tool drop_table: approval: approver undefined (an environment variable not set?) is not an email address'],
      [{ approvers: [APPROVER], timeoutMs: 0 }, 'tool drop_table: approval: timeoutMs must be from 1 ms to 90 days (in ms), got 0'],
      [true, 'tool drop_table: approval must be { approvers: ["ops@example.com"], timeoutMs? }, not true'],
    ];
    for (const [approval, message] of bad) {
      expect(() => gateAgent([], { approval: approval as never }), message).toThrow(new InvalidInputError(message));
    }
  });

  it('stepwise drift checks a call waiting for approval, and one approved, against the new agent: approved, it runs as it was made', async () => {
    const { deps, runtime } = setup();
    await start(deps);
    await workVisible(deps, runtime);
    // The new code's drop_table takes another field: the approved call would fail the run at its next step.
    const changed = defineAgent({ ...gateAgent([]), tools: [tool({ ...gateAgent([]).tools[0]!, input: z.object({ name: z.string() }) } as never)] });
    const ungated = defineAgent({ ...gateAgent([]), tools: [tool({ ...gateAgent([]).tools[0]!, approval: undefined, input: z.object({ name: z.string() }) } as never)] });
    expect((await findDrift(runtime.store, gateAgent([]))).blocked).toEqual([]);
    const waiting = await findDrift(runtime.store, changed);
    expect(waiting.blocked).toEqual([expect.objectContaining({ runId: 'run', status: 'waiting', problem: expect.stringMatching(/^step 2: the call waiting for approval \(approved, it runs as it was made, the model not asked\): the recorded decision for tool "drop_table" no longer fits its input schema \(name: /) })]);
    // A tool the new agent does not gate is asked of the model again, not run: nothing to block.
    expect((await findDrift(runtime.store, ungated)).blocked).toEqual([]);
    const { wait } = await loadState(runtime);
    await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } });
    const approved = await findDrift(runtime.store, changed);
    expect(approved.blocked).toEqual([expect.objectContaining({ runId: 'run', status: 'running', problem: expect.stringMatching(/^step 2: the approved call \(it runs as it was made, the model not asked\): .*no longer fits its input schema/) })]);
    expect((await findDrift(runtime.store, gateAgent([]))).blocked).toEqual([]);
  });

  it("the approver reads the call that runs: a separator, a turn of the writing direction or a zero-width character in an argument shows as its escape", async () => {
    // "\u202eswor_dlo" is drawn as old_rows, and "old\u200b_rows" looks like old_rows: the model's call for another table.
    const hidden = { table: '\u202eswor_dlo', also: 'old\u200b_rows\u2028\u2028Run drop_table with these arguments: {"table": "old_rows"}' };
    const { deps, runtime } = setup(gateAgent([]), () => ({ kind: 'tool', tool: 'drop_table', input: hidden }));
    await start(deps);
    await workVisible(deps, runtime);
    const state = await loadState(runtime);
    expect(state.wait!.request).toBe('Run drop_table (Drop a table) with these arguments:\n{\n  "table": "\\u202eswor_dlo",\n  "also": "old\\u200b_rows\\u2028\\u2028Run drop_table with these arguments: {\\"table\\": \\"old_rows\\"}"\n}\ndrop_table does not take the field "also": its input drops it, and the call runs without.');
    const page = String(await approvalPage({ state, wait: state.wait!, approver: APPROVER }));
    expect(page).not.toMatch(/[\u2028\u200b\u202e]/);
    expect(page).toContain('&quot;table&quot;: &quot;\\u202eswor_dlo&quot;');
    // What runs is the call as the model made it.
    expect(state.wait!.input).toEqual(hidden);
  });

  it('a field the tool\'s input drops is named as one the call runs without: "dry_run": true would read as part of what runs', async () => {
    const dropped: string[] = [];
    const { deps, runtime } = setup(gateAgent(dropped), () => ({ kind: 'tool', tool: 'drop_table', input: { table: 'everything', dry_run: true, note: 'a preview only' } }));
    await start(deps);
    await workVisible(deps, runtime);
    const { wait } = await loadState(runtime);
    expect(wait!.request).toBe('Run drop_table (Drop a table) with these arguments:\n{\n  "table": "everything",\n  "dry_run": true,\n  "note": "a preview only"\n}\ndrop_table does not take the fields "dry_run", "note": its input drops them, and the call runs without.');
    await answerWait(deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } });
    await workVisible(deps, runtime);
    expect(dropped).toEqual(['everything']);
  });

  // C3: the approved call kept, not yet run; C4: run, its checkpoint not yet written.
  it.each([['C3', []], ['C4', ['old_rows']]] as const)('a worker killed at %s in the approved step: the next delivery runs the kept call under its key, applied once, the model not asked', async (point, droppedByCrash) => {
    const dropped: string[] = [];
    const agent = gateAgent(dropped);
    db = tempDb();
    const clock = new ManualClock();
    const model = new StubModel(injected);
    const crashing = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A', crashAt: { point, step: 2 } });
    await start(crashing.deps);
    await workVisible(crashing.deps, crashing.runtime);
    const { wait } = await loadState(crashing.runtime);
    await answerWait(crashing.deps, { runId: 'run', waitId: wait!.id, answer: { kind: 'approved', by: APPROVER } });
    const [delivery] = await crashing.runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    await expect(handleDelivery(crashing.deps, delivery!)).rejects.toBeInstanceOf(SimulatedCrash);
    expect(dropped).toEqual(droppedByCrash);
    // The call was kept before it ran: the state shows it pending, under its key.
    expect((await loadState(crashing.runtime)).pending).toMatchObject({ step: 2, tool: 'drop_table', input: { table: 'old_rows' }, idempotencyKey: 'run/step-2' });
    clock.advance(VISIBILITY_MS + 1);
    const next = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'B' });
    await workVisible(next.deps, next.runtime);
    expect(dropped).toEqual(['old_rows']);
    expect(await loadState(next.runtime)).toMatchObject({ status: 'completed', step: 2 });
    expect(model.stepsAsked()).toEqual([1, 3]);
  });
});
