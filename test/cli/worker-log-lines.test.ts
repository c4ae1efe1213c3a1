import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const env = { STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '1', STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined };

/**
 * Several worker processes write to one log: a line about a run names the worker that wrote it, as the
 * Lambda's do, or an operator cannot tell which process to look at. The engine's lines named it only in
 * a checkpoint; a stale message, a refused model key or an unknown run said nothing of the worker.
 */
describe('a worker\'s log lines', () => {
  it('each name the worker once, those about a message that moves nothing too', async () => {
    expect((await stepwiseCli(['run', '--agent', AGENT, '--goal', 'write 1 row', '--run-id', 'log-1'], env)).code).toBe(0);
    // A copy of an old version's message: a stale no-op for the worker, logged as such.
    const runtime = openLocalRuntime({ dbPath: db.path });
    await runtime.queue.send({ runId: 'log-1', version: 2 });
    runtime.close();
    const worker = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '300'], env);
    expect(worker.code, worker.err).toBe(0);
    const workerId = /^worker (\S+) ready/.exec(worker.out)![1]!;
    const lines = worker.err.trim().split('\n');
    const stale = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.event === 'stale-message');
    expect(stale).toMatchObject({ level: 'info', runId: 'log-1', version: 2, workerId });
    for (const line of lines) expect(line.split('"workerId":').length - 1, line).toBe(1);
  });

  it('the line of a clock step back the worker found in the file names the worker too', async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 1 row', '--run-id', 'log-2'], env)).code).toBe(0);
    // What a step back of the clock leaves: the run's message written an hour ahead of now.
    const file = new Database(db.path);
    file.prepare('UPDATE queue SET created_at = created_at + 3600000, visible_at = visible_at + 3600000 WHERE run_id = ?').run('log-2');
    file.close();
    const worker = await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '300'], env);
    expect(worker.code, worker.err).toBe(0);
    const workerId = /^worker (\S+) ready/.exec(worker.out)![1]!;
    const lines = worker.err.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    // Was: written by a logger of its own, with neither the worker nor the agent.
    expect(lines.find((l) => l.event === 'clock-stepped-back')).toMatchObject({ level: 'warn', workerId, agent: expect.any(String) });
    // And the message counted again from now was worked, not left hidden for the hour.
    const runtime = openLocalRuntime({ dbPath: db.path });
    expect((await runtime.store.load('log-2'))!.status).toBe('completed');
    runtime.close();
  });
});
