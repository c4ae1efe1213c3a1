import { afterEach, describe, expect, it } from 'vitest';
import { forkRun } from '../../lib/engine/operate/fork.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { startRun } from '../../lib/engine/start.ts';
import { answerApproval } from '../../lib/waits/answer.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, loadState, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { ApprovalFlowModel, waitAgent } from '../support/wait-agent.ts';

/**
 * An operator's command (start, fork, retry, approve or emit; the API's too) killed right after its write
 * and before the send of the run's message: here the send throws, as the process would have died there.
 * The run was left running with no message: no worker took it until a sweep found it stalled, a minute
 * or more later, and a repeated approve said the wait was answered, a repeated retry that the run was
 * running. On the local file the write now carries the message: a worker takes the run at once.
 */
describe('an operator write on the local file carries its run\'s message', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /** The deps of a command whose process dies as it sends: anything after its write never happens. */
  const dyingAtSend = (deps: EngineDeps): EngineDeps => ({
    ...deps, queue: Object.assign(Object.create(deps.queue) as EngineDeps['queue'], { send: () => Promise.reject(new Error('killed before the send')) }),
  });
  /** What the command may have done before it died: its write, or nothing. */
  const died = async (command: Promise<unknown>) => { await command.catch((error: unknown) => expect(String(error)).toContain('killed before the send')); };

  it('start, fork and retry: a worker with no sweep works each run to its end', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: new StubModel(writeRowsScript(2)), clock, workerId: 'A' });
    const operator = dyingAtSend({ ...w.deps, workerId: 'operator' });

    await died(startRun(operator, { goal: 'write 2 rows', runId: 'run', stepCap: 1 }));
    expect(await workVisible(w.deps, w.runtime)).toBeGreaterThan(0);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'capped', step: 1 });

    await died(retryRun(operator, 'run', {}));
    await workVisible(w.deps, w.runtime);
    expect(await loadState(w.runtime)).toMatchObject({ status: 'completed', step: 2 });

    await died(forkRun(operator, 'run', { fromStep: 1, runId: 'fork' }));
    await workVisible(w.deps, w.runtime);
    expect(await loadState(w.runtime, 'fork')).toMatchObject({ status: 'completed', step: 2 });
    expect(rows.received).toEqual(['run/step-1', 'run/step-2', 'fork/step-2']);
    w.runtime.close();
  });

  it('approve: the answered wait is worked on at once', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const dropped: string[] = [];
    const w = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), dropped), model: new ApprovalFlowModel(), clock, workerId: 'A' });
    await startRun(w.deps, { goal: 'copy, then drop old_rows with approval', runId: 'run' });
    await workVisible(w.deps, w.runtime);
    expect((await loadState(w.runtime)).status).toBe('waiting');

    await died(answerApproval(dyingAtSend({ ...w.deps, workerId: 'operator' }), 'run', { decision: 'approve' }));
    await workVisible(w.deps, w.runtime);
    expect((await loadState(w.runtime)).status).toBe('completed');
    expect(dropped).toEqual(['run/step-3:old_rows']);
    w.runtime.close();
  });
});
