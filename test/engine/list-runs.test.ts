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

describe('the list of runs, for a failed run whose reason spans lines', () => {
  it('keeps each run on one row of status: the reason\'s line breaks and tabs written as \\n and \\t', () => {
    const at = Date.parse('2026-12-07T01:00:00Z');
    const table = runsTable([
      { runId: 'r1', version: 4, status: 'failed', step: 0, agent: 'obs', updatedAt: at, reason: 'step 1 failed 3 times; last error: first line\nsecond\tline\r\nthird' },
      { runId: 'r2', version: 9, status: 'completed', step: 7, agent: 'obs', updatedAt: at },
    ]);
    const lines = table.split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toBe('r1   failed     0     4        obs    2026-12-07 01:00:00Z  step 1 failed 3 times; last error: first line\\nsecond\\tline\\nthird');
    expect(lines[2]).toMatch(/^r2 +completed +7 +9 +obs/);
  });
});
