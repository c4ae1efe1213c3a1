import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { OutboxNotifier, readOutbox } from '../../lib/waits/outbox-notifier.ts';
import { SqliteEventBuffer } from '../../lib/local/sqlite-event-buffer.ts';
import type { Notification } from '../../lib/ports.ts';
import { cancelRun } from '../../lib/engine/operate/cancel.ts';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { answerApproval, answerWait } from '../../lib/waits/answer.ts';
import { verifyApproval } from '../../lib/waits/approval-token.ts';
import { keysOf, localSigningKey } from '../../lib/waits/signing-key.ts';
import { captureLogs } from '../aws/log-capture.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { StubModel } from '../support/stub-model.ts';
import { APPROVER, ApprovalFlowModel, waitAgent } from '../support/wait-agent.ts';

let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

/** A worker "process" with the local wait services: outbox emails, the key file, kept events. */
function waitWorker(clock: ManualClock, workerId: string, model = new ApprovalFlowModel(), notifier?: { send(n: Notification): Promise<void> }) {
  const rows = shared.rows;
  const proc = workerProcess({ dbPath: db.path, agent: waitAgent(rows, shared.dropped), model, clock, workerId });
  const dir = join(db.path, '..');
  const deps: EngineDeps = {
    ...proc.deps,
    waits: {
      notifier: notifier ?? new OutboxNotifier(join(dir, 'outbox')), signingKey: localSigningKey(join(dir, 'signing.key')),
      publicUrl: 'http://127.0.0.1:8787', events: new SqliteEventBuffer(proc.runtime.db, { clock }),
    },
  };
  return { deps, runtime: proc.runtime, model };
}
const shared = { rows: new FakeRows(), dropped: [] as string[] };

const outbox = () => readOutbox(join(db.path, '..', 'outbox'));

/** A fresh database with one run started and worked until it waits for its approval. */
async function waitingRun(notifier?: { send(n: Notification): Promise<void> }) {
  db = tempDb();
  shared.rows = new FakeRows();
  shared.dropped = [];
  const clock = new ManualClock();
  const a = waitWorker(clock, 'worker-A', new ApprovalFlowModel(), notifier);
  await start(a.deps, 'copy the rows, then drop old_rows with approval');
  await workVisible(a.deps, a.runtime);
  return { clock, a };
}

const waitOf = async (a: { runtime: { store: { load(id: string): Promise<unknown> } } }) =>
  decodeState((await a.runtime.store.load('run')) as never).wait!;

describe('a run that waits for approval (SQLite)', () => {
  it('saves a waiting checkpoint, emails the approver once, and continues on another worker after the approval', async () => {
    const { clock, a } = await waitingRun();
    const waiting = decodeState((await a.runtime.store.load('run'))!);
    expect(waiting).toMatchObject({ status: 'waiting', step: 1, wait: { kind: 'approval', step: 2, approvers: [APPROVER], tool: 'request_approval' } });
    expect(shared.dropped).toEqual([]);
    // Nothing computes while the run waits: only its timer is in the queue, due at the deadline.
    expect(a.runtime.queue.depth()).toBe(1);
    expect(await a.runtime.queue.receive()).toEqual([]);

    const emails = outbox();
    expect(emails).toHaveLength(1);
    const link = emails[0]!.link!;
    const token = link.split('/approvals/')[1]!;
    const key = keysOf(await localSigningKey(join(db.path, '..', 'signing.key'))()).signing;
    expect(verifyApproval(token, key, clock.now())).toMatchObject({ ok: true, claim: { runId: 'run', waitId: waiting.wait!.id, approver: APPROVER } });
    a.runtime.close();

    // Later, a different process takes the answer and another works the rest.
    clock.advance(50 * 60_000);
    const api = waitWorker(clock, 'api');
    const outcome = await answerWait(api.deps, { runId: 'run', waitId: waiting.wait!.id, answer: { kind: 'approved', by: APPROVER, comment: 'go ahead' } });
    expect(outcome).toMatchObject({ outcome: 'resumed' });
    const again = await answerWait(api.deps, { runId: 'run', waitId: waiting.wait!.id, answer: { kind: 'rejected', by: APPROVER } });
    expect(again).toMatchObject({ outcome: 'already-answered', record: { step: 2 } });
    api.runtime.close();

    const b = waitWorker(clock, 'worker-B');
    await workVisible(b.deps, b.runtime);
    const done = decodeState((await b.runtime.store.load('run'))!);
    expect(done).toMatchObject({ status: 'completed', step: 3, summary: 'Copied and dropped old_rows.' });
    expect(done.steps[1]).toMatchObject({ tool: 'request_approval', waitId: waiting.wait!.id, result: { ok: true } });
    expect(done.steps[1]!.result.text).toContain('"comment":"go ahead"');
    expect(done.steps[2]).toMatchObject({ tool: 'drop_table', workerId: 'worker-B' });
    expect(shared.dropped).toEqual(['run/step-3:old_rows']);
    expect(outbox()).toHaveLength(1);
    // The timer of the answered wait is gone: the answer's message rewrote the run's queue row. Nothing
    // comes due at the deadline, and nothing changes.
    const finalVersion = (await b.runtime.store.load('run'))!.version;
    expect(b.runtime.queue.depth()).toBe(0);
    clock.advance(3_600_000);
    expect(await workVisible(b.deps, b.runtime)).toBe(0);
    expect((await b.runtime.store.load('run'))!.version).toBe(finalVersion);
    b.runtime.close();
  });

  it('keeps the link to its approver: the email file is its owner\'s alone, and the log line masks the signature', async () => {
    db = tempDb();
    const a = waitWorker(new ManualClock(), 'worker-A');
    const { log, lines } = captureLogs();
    const deps = { ...a.deps, log };
    await start(deps, 'copy the rows, then drop old_rows with approval');
    await workVisible(deps, a.runtime);
    a.runtime.close();
    const [email] = outbox();
    expect(statSync(email!.file).mode & 0o777).toBe(0o600);
    const token = email!.link!.split('/approvals/')[1]!;
    const [requested] = lines.filter((l) => l.event === 'approval-requested');
    expect(requested!.link).toBe(`http://127.0.0.1:8787/approvals/${token.slice(0, token.lastIndexOf('.'))}.***`);
    expect(JSON.stringify(lines)).not.toContain(token.split('.')[2]);
  });

  it('a rejection is the step\'s result: the model sees it and acts on it', async () => {
    const { clock, a } = await waitingRun();
    const wait = await waitOf(a);
    expect(await answerWait(a.deps, { runId: 'run', waitId: wait.id, answer: { kind: 'rejected', by: APPROVER, comment: 'not during business hours' } }))
      .toMatchObject({ outcome: 'resumed' });
    await workVisible(a.deps, a.runtime);
    const done = decodeState((await a.runtime.store.load('run'))!);
    expect(done).toMatchObject({ status: 'completed', summary: 'Rejected: old_rows kept.' });
    expect(a.model.prompts.at(-1)).toContain('not during business hours');
    expect(shared.dropped).toEqual([]);
    a.runtime.close();
  });

  it('at the deadline the run resumes with "timed out", and a late approval changes nothing', async () => {
    const { clock, a } = await waitingRun();
    const wait = await waitOf(a);
    clock.advance(3_600_000);
    expect(await workVisible(a.deps, a.runtime)).toBeGreaterThan(0);
    const done = decodeState((await a.runtime.store.load('run'))!);
    expect(done).toMatchObject({ status: 'completed', summary: 'Nobody approved in time: old_rows kept.' });
    expect(done.steps[1]!.result).toMatchObject({ ok: false });
    // Answered by wait id (the API, the page): told the approval expired, not that someone answered it.
    const late = await answerWait(a.deps, { runId: 'run', waitId: wait.id, answer: { kind: 'approved', by: APPROVER } });
    expect(late).toEqual({ outcome: 'expired', runId: 'run', waitId: wait.id, deadline: wait.deadline });
    // Answered by run id (the CLI's approve): told the same, not that the run is not waiting.
    expect(await answerApproval(a.deps, 'run', { decision: 'approve' })).toEqual({ outcome: 'expired', runId: 'run', waitId: wait.id, deadline: wait.deadline });
    expect(shared.dropped).toEqual([]);
    a.runtime.close();
  });

  it('an approval racing the deadline: exactly one wins', async () => {
    const { clock, a } = await waitingRun();
    const wait = await waitOf(a);
    clock.advance(3_600_000 - 1);
    const b = waitWorker(clock, 'worker-B');
    const [approval, timeout] = await Promise.all([
      answerWait(a.deps, { runId: 'run', waitId: wait.id, answer: { kind: 'approved', by: APPROVER } }),
      answerWait(b.deps, { runId: 'run', waitId: wait.id, answer: { kind: 'timed-out' } }),
    ]);
    // The timer that loses is told the wait was answered; an approval that loses, that it expired.
    const outcomes = [approval.outcome, timeout.outcome];
    expect(outcomes.filter((o) => o === 'resumed')).toHaveLength(1);
    expect(outcomes).toEqual(approval.outcome === 'resumed' ? ['resumed', 'already-answered'] : ['expired', 'resumed']);
    const state = decodeState((await a.runtime.store.load('run'))!);
    expect(state.steps.filter((s) => s.waitId === wait.id)).toHaveLength(1);
    a.runtime.close();
    b.runtime.close();
  });

  it('sends the email once per wait even when sending fails and the delivery is retried', async () => {
    const sent: string[] = [];
    let failures = 1;
    const flaky = { send: async (n: Notification) => { if (failures-- > 0) throw new Error('mail server down'); sent.push(n.id); } };
    await expect(waitingRun(flaky)).rejects.toThrow(/mail server down/);
    // That worker is gone; a new process (its clock starting where the first one's did) takes over.
    const clock = new ManualClock();
    const a = waitWorker(clock, 'worker-A', new ApprovalFlowModel(), flaky);
    expect(decodeState((await a.runtime.store.load('run'))!).status).toBe('waiting');
    expect(sent).toEqual([]);
    clock.advance(1001);
    await workVisible(a.deps, a.runtime);
    // A stray duplicate of the step's message (C8) drives the wait again: still one email.
    await a.runtime.queue.send({ runId: 'run', version: 2 });
    a.runtime.db.prepare("UPDATE queue SET acked_at = NULL, visible_at = 0 WHERE dedup_key = 'run' AND version = 2").run();
    await workVisible(a.deps, a.runtime);
    expect(sent).toEqual([`run/wait-${decodeState((await a.runtime.store.load('run'))!).wait!.id}/${APPROVER}`]);
    a.runtime.close();
  });

  it('refuses an answer from someone who is not an approver, changing nothing', async () => {
    const { a } = await waitingRun();
    const before = (await a.runtime.store.load('run'))!;
    const wait = decodeState(before).wait!;
    expect(await answerWait(a.deps, { runId: 'run', waitId: wait.id, answer: { kind: 'approved', by: 'mallory@example.com' } }))
      .toMatchObject({ outcome: 'refused', reason: expect.stringContaining('not an approver') });
    expect(await answerWait(a.deps, { runId: 'run', waitId: 'wait-unknown', answer: { kind: 'approved', by: APPROVER } }))
      .toMatchObject({ outcome: 'not-waiting' });
    expect(await answerWait(a.deps, { runId: 'nope', waitId: wait.id, answer: { kind: 'approved', by: APPROVER } }))
      .toMatchObject({ outcome: 'unknown-run' });
    expect((await a.runtime.store.load('run'))!.version).toBe(before.version);
    a.runtime.close();
  });

  it('a run paused longer than the checkpoint retention window still resumes', async () => {
    const { clock, a } = await waitingRun();
    const wait = await waitOf(a);
    clock.advance(59 * 60_000);
    // The retention window is 7 days by default; move the clock's notion of "old" by pruning with a
    // store whose retention is shorter than the pause.
    const { SqliteCheckpointStore } = await import('../../lib/local/sqlite-checkpoint-store.ts');
    const pruned = new SqliteCheckpointStore(a.runtime.db, { clock, retentionMs: 1000 });
    a.runtime.db.prepare('UPDATE checkpoints SET expires_at = ?').run(clock.now() - 1);
    expect(pruned.prune()).toBeGreaterThan(0);
    expect(await answerWait(a.deps, { runId: 'run', waitId: wait.id, answer: { kind: 'approved', by: APPROVER } })).toMatchObject({ outcome: 'resumed' });
    await workVisible(a.deps, a.runtime);
    expect(decodeState((await a.runtime.store.load('run'))!).status).toBe('completed');
    a.runtime.close();
  });

  it('approve by run id, on a run cancelled while it waited for its second approval: told it is cancelled, not that the first was answered', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const ask = (request: string) => ({ kind: 'tool' as const, tool: 'request_approval', input: { request } });
    const a = waitWorker(clock, 'worker-A', new StubModel((step) => step === 1 ? ask('first') : step === 2 ? ask('second') : { kind: 'done', summary: 'x' }) as never);
    await start(a.deps);
    await workVisible(a.deps, a.runtime);
    expect(await answerApproval(a.deps, 'run', { decision: 'approve' })).toMatchObject({ outcome: 'resumed' });
    await workVisible(a.deps, a.runtime);
    expect((await waitOf(a)).step).toBe(2);
    expect(await cancelRun(a.deps, 'run', { by: 'ops' })).toMatchObject({ outcome: 'cancelled' });
    // The approval the run waited for last was dropped with the cancel, never answered.
    await expect(answerApproval(a.deps, 'run', { decision: 'approve' })).rejects.toThrow('run run is not waiting (it is cancelled)');
    a.runtime.close();
  });

  it('approve by run id on a fork made past its parent\'s approval: told the fork is not waiting, not that the parent\'s approver answered it', async () => {
    const { a } = await waitingRun();
    expect(await answerApproval(a.deps, 'run', { decision: 'approve', by: APPROVER })).toMatchObject({ outcome: 'resumed' });
    await workVisible(a.deps, a.runtime);
    expect(await forkRun(a.deps, 'run', { fromStep: 2, runId: 'fork' })).toMatchObject({ created: true });
    const before = (await a.runtime.store.load('fork'))!.version;
    await expect(answerApproval(a.deps, 'fork', { decision: 'reject' })).rejects.toThrow('run fork is not waiting (it is running)');
    expect((await a.runtime.store.load('fork'))!.version).toBe(before);
    // The parent's own approval is still said to be answered, by whom.
    expect(await answerApproval(a.deps, 'run', { decision: 'reject' })).toMatchObject({ outcome: 'already-answered', record: { step: 2 } });
    a.runtime.close();
  });

  it('approve by run id with a comment over the 4,000 characters the page and the API take: refused, nothing changed', async () => {
    const { a } = await waitingRun();
    const before = (await a.runtime.store.load('run'))!.version;
    await expect(answerApproval(a.deps, 'run', { decision: 'approve', comment: 'x'.repeat(4001) })).rejects.toThrow('a comment may be at most 4,000 characters; this one has 4,001');
    expect((await a.runtime.store.load('run'))!.version).toBe(before);
    expect(await answerApproval(a.deps, 'run', { decision: 'approve', comment: 'x'.repeat(4000) })).toMatchObject({ outcome: 'resumed' });
    a.runtime.close();
  });
});
