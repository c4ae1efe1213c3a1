import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { beginWait, waitRecordFor } from '../../lib/core/waits.ts';
import { RECORD_FORMATS } from '../../lib/core/record-formats.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { META, newState } from '../support/states.ts';

/**
 * A rollback: a run waiting for an approval whose wait record a newer release wrote (a format this code
 * does not read). The operator's commands on it change nothing and say which format it needs; their exit
 * code says it is not worth running again with this release (2), where 1 asks for just that.
 */
describe('commands on a run this code cannot read (a newer format), after a rollback', () => {
  const db = tempDb();
  afterAll(() => db.cleanup());

  it('change nothing and exit 2, naming the format the run needs', { timeout: 120_000 }, async () => {
    const runtime = openLocalRuntime({ dbPath: db.path });
    const now = Date.now();
    const wait = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop it', timeoutMs: 3600_000 }, { step: 1, tool: 'request_approval', input: {}, at: now }, 'wait-newer-0001', now);
    await runtime.store.create(newState('w'), META);
    await runtime.store.commit({ runId: 'w', expectedVersion: 1, state: beginWait(newState('w'), wait, now), ...META });
    runtime.close();
    // The newer release's wait record: one format past this code's.
    const newer = RECORD_FORMATS.wait + 1;
    const file = new Database(db.path);
    const row = file.prepare("SELECT id, head FROM checkpoints WHERE run_id = 'w' ORDER BY id DESC LIMIT 1").get() as { id: number; head: string };
    const head = JSON.parse(row.head) as { wait: Record<string, unknown> };
    head.wait.formatVersion = newer;
    file.prepare('UPDATE checkpoints SET head = ? WHERE id = ?').run(JSON.stringify(head), row.id);
    file.close();

    const line = `stepwise: run w: wait has wait format ${newer}, but this code reads wait format ${RECORD_FORMATS.wait} at most: it needs code that reads wait format ${newer}; left as it is for a newer worker`;
    for (const args of [['approve', 'w', '--as', 'ops@example.com'], ['reject', 'w', '--as', 'ops@example.com'], ['cancel', 'w'], ['retry', 'w'], ['show', 'w'], ['fork', 'w', '--from-step', '0', '--run-id', 'w2']]) {
      const cli = await stepwiseCli([...args, '--db', db.path], { STEPWISE_LOG_LEVEL: 'warn' });
      expect({ args, code: cli.code, err: cli.err.trim() }).toEqual({ args, code: 2, err: line });
    }
    const status = await stepwiseCli(['status', 'w', '--json', '--db', db.path], {});
    expect(JSON.parse(status.out)).toMatchObject({ status: 'waiting', version: 2, needs: `wait format ${newer}` });
  });
});
