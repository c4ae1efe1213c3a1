import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { beginWait, waitRecordFor } from '../../lib/core/waits.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';
import { META, newState } from '../support/states.ts';

const AGENT = join(ROOT, 'test/support/event-agent.ts');
const db = tempDb();
const env = { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };
const stepwise = (...args: string[]) => stepwiseCli(args, env);
afterAll(() => db.cleanup());

describe('a run waiting for an event, from the terminal', () => {
  it('status says what it waits for and how to answer; emit resumes it once; a worker finishes it', { timeout: 120_000 }, async () => {
    expect((await stepwise('start', '--agent', AGENT, '--goal', 'wait for order 42', '--run-id', 'ev-1')).code).toBe(0);
    const first = await stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '1000');
    expect(first.out).toMatch(/^run ev-1 v2 {2}step 1 {2}waiting for event order\.paid order-42 until \S+$/m);

    const status = await stepwise('status', 'ev-1');
    expect(status.out).toMatch(/^status {3}waiting$/m);
    expect(status.out).toMatch(/^waiting {2}step 1: event order\.paid order-42 until \S+ \S+Z \(wait [0-9a-f-]{36}\); answer: stepwise emit order\.paid order-42 \[json\]$/m);

    // The wrong answer for this wait, and events no wait could name, change nothing.
    const approve = await stepwise('approve', 'ev-1');
    expect(approve.code).toBe(2);
    expect(approve.err.trim()).toBe('stepwise: run ev-1 waits for event order.paid/order-42, not an approval');
    const badKey = await stepwise('emit', 'order.paid', 'order 42');
    expect(badKey.code).toBe(2);
    expect(badKey.err.trim()).toBe('stepwise: invalid event: key: a correlation key is 1-256 letters, digits or ._:/@+-');
    const badPayload = await stepwise('emit', 'order.paid', 'order-42', '{amount: 12}');
    expect(badPayload.code).toBe(2);
    expect(badPayload.err.trim()).toBe('stepwise: the payload is not valid JSON: {amount: 12}');
    expect(JSON.parse((await stepwise('status', 'ev-1', '--json')).out)).toMatchObject({ status: 'waiting', version: 2 });

    const emitted = await stepwise('emit', 'order.paid', 'order-42', '{"amount":12}', '--id', 'evt-42');
    expect(emitted.code).toBe(0);
    expect(emitted.out.trim()).toBe('event evt-42 (order.paid/order-42): resumed ev-1');
    // The same event delivered again is recognised, and the wait it answered is not answered twice.
    const again = await stepwise('emit', 'order.paid', 'order-42', '{"amount":12}', '--id', 'evt-42');
    expect(again.out.trim()).toBe('event evt-42 (order.paid/order-42) seen before: no run was waiting for it; kept for a wait that begins soon');

    const second = await stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '1000');
    expect(second.out).toMatch(/^run ev-1 v\d+ {2}completed after 1 step: saw: .*"amount":12/m);
    const done = JSON.parse((await stepwise('status', 'ev-1', '--json')).out) as { status: string; steps: { tool: string; result: { text: string } }[] };
    expect(done.status).toBe('completed');
    expect(done.steps).toHaveLength(1);
    expect(JSON.parse(done.steps[0]!.result.text)).toMatchObject({ event: 'order.paid', id: 'evt-42', payload: { amount: 12 } });
  });

  it('`run` stopped at a wait says how to answer it and how to go on; after the answer, run --run-id finishes it', { timeout: 120_000 }, async () => {
    const own = tempDb();
    const ownEnv = { ...env, STEPWISE_DB: own.path, EFFECTS_DB: join(own.path, '..', 'effects.db') };
    try {
      const event = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'wait for order 42', '--run-id', 'ev-run'], ownEnv);
      expect(event.code).toBe(0);
      expect(event.out.trim().split('\n').at(-1)).toBe(`run ev-run: waiting at version 2 (answer with \`stepwise emit order.paid order-42 [json]\`; then \`stepwise run --agent ${AGENT} --run-id ev-run\` or a worker continues it)`);
      expect((await stepwiseCli(['emit', 'order.paid', 'order-42', '{"amount":5}'], ownEnv)).code).toBe(0);
      const done = await stepwiseCli(['run', '--agent', AGENT, '--run-id', 'ev-run'], ownEnv);
      expect(done.out.trim().split('\n').at(-1)).toBe('run ev-run: completed at version 4');

      const approvalAgent = join(ROOT, 'test/support/approval-agent.ts');
      const approval = await stepwiseCli(['run', '--agent', approvalAgent, '--goal', 'copy, then drop', '--run-id', 'ap-run'], ownEnv);
      expect(approval.code).toBe(0);
      expect(approval.out).toMatch(/^ {2}approve or reject: http:\/\/127\.0\.0\.1:8787\/approvals\/v1\.\S+$/m);
      expect(approval.out.trim().split('\n').at(-1)).toBe(`run ap-run: waiting at version 3 (answer with \`stepwise approve|reject ap-run\`, or open the link while \`stepwise serve --agent ${approvalAgent}\` runs; then \`stepwise run --agent ${approvalAgent} --run-id ap-run\` or a worker continues it)`);
      // Someone who is not an approver is bad input: exit 2, the reason on stderr, the wait untouched.
      const stranger = await stepwiseCli(['approve', 'ap-run', '--as', 'mallory@example.com'], ownEnv);
      expect(stranger.code).toBe(2);
      expect(stranger.out).toBe('');
      expect(stranger.err.trim()).toMatch(/^stepwise: refused: "mallory@example\.com" is not an approver of wait [0-9a-f-]{36}$/);
      expect(JSON.parse((await stepwiseCli(['status', 'ap-run', '--json'], ownEnv)).out)).toMatchObject({ status: 'waiting', version: 3 });
      // Approved (as the approver, with the space a script's variable left around the address), then
      // rejected: the second says who answered and how, where it said only "already answered".
      expect((await stepwiseCli(['approve', 'ap-run', '--as', ' ops@example.com '], ownEnv)).code).toBe(0);
      // Nothing changed and nothing will: exit 2 with the reason on stderr, never 1, which says to run it again.
      const late = await stepwiseCli(['reject', 'ap-run'], ownEnv);
      expect(late.code).toBe(2);
      expect(late.out).toBe('');
      expect(late.err.trim()).toMatch(/^stepwise: run ap-run: Already approved by ops@example\.com at \S+\. Nothing changed\.$/);
      // A fork past the approval copies it, and says so: its model reads it as given to the fork.
      const forked = await stepwiseCli(['fork', 'ap-run', '--from-step', '2', '--run-id', 'ap-fork', '--agent', approvalAgent], ownEnv);
      expect(forked.code, forked.err).toBe(0);
      expect(forked.out.trim().split('\n').at(-1)).toBe('  its copied steps hold an approval: step 2 (request_approval, by ops@example.com); its model reads it as given to it (a tool with approval asks again); fork from an earlier step to ask anew');
      const before = await stepwiseCli(['fork', 'ap-run', '--from-step', '1', '--run-id', 'ap-fork-1', '--agent', approvalAgent], ownEnv);
      expect(before.out).not.toContain('copied steps hold');
    } finally {
      own.cleanup();
    }
  });

  it('approve after the deadline says the approval expired and the run went on with "timed out", in the past tense however long ago', async () => {
    const own = tempDb();
    try {
      // A run that waited for an approval two hours ago, for an hour: its timer has not come yet.
      const runtime = openLocalRuntime({ dbPath: own.path });
      const then = Date.now() - 2 * 3600_000;
      const wait = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop it', timeoutMs: 3600_000 }, { step: 1, tool: 'request_approval', input: {}, at: then }, 'wait-late-0001', then);
      await runtime.store.create(newState('ap-late'), META);
      await runtime.store.commit({ runId: 'ap-late', expectedVersion: 1, state: beginWait(newState('ap-late'), wait, then), ...META });
      runtime.close();
      const late = await stepwiseCli(['approve', 'ap-late'], { ...env, STEPWISE_DB: own.path });
      expect(late.code).toBe(2);
      expect(late.err.trim()).toBe(`stepwise: run ap-late: the approval expired at ${new Date(wait.deadline).toISOString()}; the run went on with "timed out", not this answer`);
    } finally {
      own.cleanup();
    }
  });

  it('emit after the deadline says the wait had expired and the run goes on with "timed out", not that no run waited', { timeout: 120_000 }, async () => {
    const own = tempDb();
    const ownEnv = { ...env, STEPWISE_DB: own.path };
    try {
      const short = join(ROOT, 'test/support/short-event-agent.ts');
      const run = await stepwiseCli(['run', '--agent', short, '--goal', 'wait a second for order late', '--run-id', 'ev-late'], ownEnv);
      expect(run.out.trim().split('\n').at(-1)).toMatch(/^run ev-late: waiting at version 2 /);
      const { wait } = JSON.parse((await stepwiseCli(['status', 'ev-late', '--json'], ownEnv)).out) as { wait: { deadline: number } };
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, wait.deadline - Date.now()) + 200));
      const late = await stepwiseCli(['emit', 'order.paid', 'order-late', '{"amount":1}', '--id', 'late-1'], ownEnv);
      expect(late.code).toBe(0);
      expect(late.out.trim()).toBe(`event late-1 (order.paid/order-late): run ev-late: the wait had expired at ${new Date(wait.deadline).toISOString()}; it went on with "timed out", not this event; kept for a wait that begins soon`);
      const done = await stepwiseCli(['run', '--agent', short, '--run-id', 'ev-late'], ownEnv);
      expect(done.out).toMatch(/completed after 1 step: saw: .*"timedOut":true/);
    } finally {
      own.cleanup();
    }
  });

  it('`run` whose wait is answered as it begins, by an event sent before, works on to the end in one go', { timeout: 120_000 }, async () => {
    const own = tempDb();
    const ownEnv = { ...env, STEPWISE_DB: own.path };
    try {
      expect((await stepwiseCli(['emit', 'order.paid', 'order-42', '{"amount":9}', '--id', 'early'], ownEnv)).out.trim())
        .toBe('event early (order.paid/order-42): no run was waiting for it; kept for a wait that begins soon');
      const run = await stepwiseCli(['run', '--agent', AGENT, '--goal', 'wait for order 42', '--run-id', 'ev-early'], ownEnv);
      expect(run.code).toBe(0);
      expect(run.out).toMatch(/^run ev-early v2 {2}step 1 {2}waiting for event order\.paid order-42 until \S+$/m);
      expect(run.out).toMatch(/^run ev-early v\d+ {2}completed after 1 step: saw: .*"amount":9/m);
      expect(run.out.trim().split('\n').at(-1)).toBe('run ev-early: completed at version 4');
    } finally {
      own.cleanup();
    }
  });
});
