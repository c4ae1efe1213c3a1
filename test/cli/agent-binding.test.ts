import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const RENAMED = join(ROOT, 'test/support/renamed-agent.ts');
const RENAMED_DECLARED = join(ROOT, 'test/support/renamed-agent-former.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const env = { STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined };

describe('a renamed agent on the stepwise command', () => {
  it('is a clear error, not a silent takeover, until it names its former name', async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'old-1'], env)).code).toBe(0);

    // The renamed agent's worker leaves the run alone and says why, in the terminal's readable form.
    const worker = await stepwiseCli(['worker', '--agent', RENAMED, '--idle-exit-ms', '300', '--log', 'pretty'], env);
    expect(worker.code).toBe(0);
    expect(worker.out).toMatch(/^worker \S+ ready: agent process-rows-v2, model /);
    expect(worker.out).not.toContain('step 1');
    expect(worker.err).toMatch(/^warn: 1 queued message belongs to other agents \(process-rows: 1\); this worker \(agent "process-rows-v2"\) leaves them for their workers\. If "process-rows" was renamed to "process-rows-v2", add formerNames: \["process-rows"\] to its defineAgent \(/);

    // Working that run in the foreground under the new name is refused with the fix.
    const run = await stepwiseCli(['run', '--agent', RENAMED, '--goal', 'write 2 rows', '--run-id', 'old-1'], env);
    expect(run.code).toBe(2);
    expect(run.err).toBe('stepwise: run old-1 belongs to agent "process-rows", not "process-rows-v2": use that agent\'s module or another run id; if "process-rows" was renamed to "process-rows-v2", add formerNames: ["process-rows"] to its defineAgent\n');

    // Declared, the renamed agent takes its old run over and finishes it.
    const declared = await stepwiseCli(['worker', '--agent', RENAMED_DECLARED, '--idle-exit-ms', '300'], env);
    expect(declared.code).toBe(0);
    expect(declared.out).toContain('run old-1 v4  completed after 2 steps');
    const status = JSON.parse((await stepwiseCli(['status', 'old-1', '--json'], env)).out) as { status: string; agent: string };
    expect(status).toMatchObject({ status: 'completed', agent: 'process-rows' });
  });
});
