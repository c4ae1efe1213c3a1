import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const env = { STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined };

/** The documented ready line (README, "Workers and supervisors"). */
const READY = /^worker (\S+) ready: agent (\S+), model (.+)$/;

describe('a worker that is ready', () => {
  it('says so in a stable form on stdout and as a worker-ready log event, so a supervisor can wait for it', async () => {
    const worker = spawn(process.execPath, [BIN, 'worker', '--agent', AGENT], { cwd: ROOT, env: { ...process.env, ...env } });
    let err = '';
    worker.stderr.on('data', (d: Buffer) => { err += d; });
    const lines = createInterface({ input: worker.stdout })[Symbol.asyncIterator]();
    try {
      // A supervisor waits for the ready line before it hands the worker anything.
      const first = (await lines.next()).value as string;
      const ready = READY.exec(first);
      expect(ready, first).not.toBeNull();
      const [, workerId, agent, model] = ready!;
      expect(agent).toBe('process-rows');
      expect(model).toContain('offline scripted model "process-test-rows"');

      const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'ready-1'], env);
      expect(started.code).toBe(0);
      let line: string;
      do line = (await lines.next()).value as string; while (line !== undefined && !line.includes('completed after'));
      expect(line).toContain('run ready-1 v4  completed after 2 steps');

      worker.kill('SIGTERM');
      // Said when the signal comes, then when the worker has stopped.
      expect((await lines.next()).value).toBe(`worker ${workerId} stopping (SIGTERM): the steps in hand finish and are checkpointed first, what it received is handed back; SIGTERM again stops it at once`);
      expect((await lines.next()).value).toBe(`worker ${workerId} stopped`);
      const [code] = await once(worker, 'exit');
      expect(code).toBe(0);
      const events = err.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(events.find((e) => e.event === 'worker-ready')).toMatchObject({ level: 'info', workerId, agent: 'process-rows', model, msg: 'worker ready' });
      // Every line of the worker names its agent, as on Lambda: several agents' workers share a file.
      const checkpoints = events.filter((e) => e.event === 'checkpoint');
      expect(checkpoints.length).toBeGreaterThan(0);
      for (const line of checkpoints) expect(line).toMatchObject({ agent: 'process-rows', runId: 'ready-1' });
      // The ready event comes before the worker's first checkpoint.
      expect(events.findIndex((e) => e.event === 'worker-ready')).toBeLessThan(events.findIndex((e) => e.event === 'checkpoint'));
      // And its pair, last, for a supervisor that reads the logs.
      expect(events.at(-1)).toMatchObject({ level: 'info', event: 'worker-stopped', workerId, agent: 'process-rows', backend: 'local', reason: 'signal', msg: 'worker stopped' });
    } finally {
      worker.kill('SIGKILL');
    }
  });

  it('says it stopped for having no step to work, with --idle-exit-ms, not as though it were told to', async () => {
    const worker = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '300'], env);
    expect(worker.code).toBe(0);
    const lines = worker.out.trim().split('\n');
    const workerId = READY.exec(lines[0]!)![1];
    expect(lines.at(-1)).toBe(`worker ${workerId} stopped: no step to work for 300 ms (--idle-exit-ms)`);
    const events = worker.err.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(events.at(-1)).toMatchObject({ event: 'worker-stopped', workerId, reason: 'idle' });
  });
});
