import { afterEach, describe, expect, it } from 'vitest';
import { runsTable } from '../../lib/cli/format.ts';
import { listRuns } from '../../lib/engine/operate/list.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { APPROVER, ApprovalFlowModel, OneWaitModel, waitAgent } from '../support/wait-agent.ts';

/**
 * A waiting run has no reason to show, and its row said nothing: what it waits for, and until when, is
 * what the operator reading `status` (or GET /runs) needs to move it.
 */
describe('the list of runs, for a waiting run', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('says what each run waits for and until when, in the REASON column of status', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const agent = waitAgent(new FakeRows(), []);
    const approval = workerProcess({ dbPath: db.path, agent, model: new ApprovalFlowModel(), clock, workerId: 'A' });
    await start(approval.deps, 'copy, then drop old_rows', 'asks');
    await workVisible(approval.deps, approval.runtime);
    const event = workerProcess({ dbPath: db.path, agent, model: new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'invoice.paid', key: 'inv-7', timeoutMs: 60_000 } }), clock, workerId: 'B' });
    await start(event.deps, 'wait for the invoice', 'listens');
    await workVisible(event.deps, event.runtime);

    const rows = await listRuns(approval.runtime.store, {});
    const asks = rows.find((r) => r.runId === 'asks')!;
    expect(asks).toMatchObject({ status: 'waiting', step: 1, wait: { kind: 'approval', step: 2, approvers: [APPROVER], deadline: expect.any(Number) } });
    expect(rows.find((r) => r.runId === 'listens')).toMatchObject({ status: 'waiting', wait: { kind: 'event', step: 1, event: { type: 'invoice.paid', key: 'inv-7' } } });
    const table = runsTable(rows);
    const iso = new Date(asks.wait!.deadline).toISOString().replace(/\.\d+Z$/, 'Z').replace('T', ' ');
    expect(table).toMatch(new RegExp(`^asks +waiting +1 .* waits for approval by ${APPROVER} until ${iso}$`, 'm'));
    expect(table).toMatch(/^listens +waiting +0 .* waits for event invoice\.paid inv-7 until \S+ \S+$/m);
    approval.runtime.close();
    event.runtime.close();
  });
});
