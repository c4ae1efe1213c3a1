import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());

function stepwise(...args: string[]) {
  return stepwiseCli(args, { STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_LOG_LEVEL: 'warn' });
}

describe('stepwise worker --stall-ms', () => {
  it('re-drives a running run that has no message left, then works it to the end', async () => {
    expect((await stepwise('start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'lost-1')).code).toBe(0);
    // Its message is consumed by something that then does nothing more: the run has nothing to move it.
    const runtime = openLocalRuntime({ dbPath: db.path });
    const [lost] = await runtime.queue.receive();
    expect(await runtime.queue.ack(lost!)).toBe(true);
    expect(runtime.queue.depth()).toBe(0);
    runtime.close();

    const worker = await stepwise('worker', '--agent', AGENT, '--stall-ms', '1', '--idle-exit-ms', '1000');
    expect(worker.code).toBe(0);
    expect(worker.out).toContain('run lost-1 v4  completed after 2 steps: wrote 2 rows');
    expect(worker.err).toContain('"event":"run-requeued"');
  });
});
