import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, stepwiseSync } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { outboxEmails } from '../support/outbox.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
const EFFECTS = db.path.replace(/stepwise\.db$/, 'effects.db');
afterAll(() => db.cleanup());

// The agent's effect runs inside ctx.once: the idempotency ledger decides whether it runs again.
const env = { STEPWISE_DB: db.path, EFFECTS_DB: EFFECTS, PROCESS_AGENT_ROWS: '2', PROCESS_AGENT_ONCE_LEASE_MS: '60000', STEPWISE_LOG_FORMAT: 'json' };
const stepwise = (args: string[]) => stepwiseSync(args, env);

function received(): Record<string, number> {
  const d = new Database(EFFECTS, { readonly: true });
  try {
    return Object.fromEntries((d.prepare('SELECT key, COUNT(*) AS n FROM received GROUP BY key').all() as { key: string; n: number }[]).map((r) => [r.key, r.n]));
  } finally {
    d.close();
  }
}

describe('stepwise delete', { timeout: 120_000 }, () => {
  it('deletes an ended run; the same id then starts anew and its effects run; a running or unknown run is refused', () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'del-1']).code).toBe(0);
    // Not ended yet: refused, with what to do.
    const refused = stepwise(['delete', 'del-1']);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain('run del-1 is running: only a run that has ended can be deleted; cancel it first (stepwise cancel del-1)');
    expect(stepwise(['worker', '--agent', AGENT, '--idle-exit-ms', '300']).code).toBe(0);
    expect(received()).toEqual({ 'del-1/step-1': 1, 'del-1/step-2': 1 });

    const deleted = stepwise(['delete', 'del-1', '--json']);
    expect(deleted.code).toBe(0);
    expect(JSON.parse(deleted.out)).toMatchObject({ outcome: 'deleted', runId: 'del-1', status: 'completed', version: 4 });
    const status = stepwise(['status', 'del-1']);
    expect(status.code).toBe(2);
    expect(status.err).toContain('unknown run: del-1');
    const again = stepwise(['delete', 'del-1']);
    expect(again.code).toBe(2);
    expect(again.err).toContain('unknown run: del-1');

    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 2 rows again', '--run-id', 'del-1']).code).toBe(0);
    expect(stepwise(['worker', '--agent', AGENT, '--idle-exit-ms', '300']).code).toBe(0);
    // Run again, not answered from the deleted run's idempotency records.
    expect(received()).toEqual({ 'del-1/step-1': 2, 'del-1/step-2': 2 });
    expect(JSON.parse(stepwise(['status', 'del-1', '--json']).out)).toMatchObject({ status: 'completed' });
    const text = stepwise(['delete', 'del-1']);
    expect(text.code).toBe(0);
    expect(text.out).toContain('run del-1 (completed at version 4) deleted');
    expect(text.out).toContain('freed by the next stepwise prune');
  });

  it('refuses, exit 2, while an effect of the run still holds its key, saying when to try again; deletes it once the effect has finished', async () => {
    expect(stepwise(['start', '--agent', AGENT, '--goal', 'write 2 rows', '--run-id', 'del-held']).code).toBe(0);
    expect(stepwise(['worker', '--agent', AGENT, '--idle-exit-ms', '300']).code).toBe(0);
    // An effect of the ended run goes on in this process (its try ended by the tool's timeoutMs).
    const runtime = openLocalRuntime({ dbPath: db.path });
    try {
      let finish!: (value: string) => void;
      let started!: () => void;
      const entered = new Promise<void>((resolve) => { started = resolve; });
      const done = runtime.ledger.once('del-held/step-3', {}, () => { started(); return new Promise<string>((resolve) => { finish = resolve; }); });
      await entered;
      const refused = stepwise(['delete', 'del-held']);
      expect(refused.code).toBe(2);
      expect(refused.err).toMatch(/run del-held \(completed\) cannot be deleted yet: an effect of it is still running under idempotency key del-held\/step-3, whose claim ends at \S+ unless its holder renews it; nothing was deleted: delete it again in \d+ s/);
      expect(JSON.parse(stepwise(['status', 'del-held', '--json']).out)).toMatchObject({ status: 'completed' });
      finish('applied');
      expect(await done).toBe('applied');
    } finally {
      runtime.close();
    }
    const deleted = stepwise(['delete', 'del-held']);
    expect(deleted.code, deleted.err).toBe(0);
    expect(deleted.out).toContain('run del-held (completed at version 4) deleted');
  });

  it('deletes the approval emails the run left in the outbox, and no other run\'s', () => {
    const own = tempDb();
    try {
      const approvalAgent = join(ROOT, 'test/support/approval-agent.ts');
      const ownEnv = { STEPWISE_DB: own.path, EFFECTS_DB: join(own.path, '..', 'effects.db'), STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };
      const run = (args: string[]) => stepwiseSync(args, ownEnv);
      const outbox = join(own.path, '..', 'outbox');
      for (const id of ['ap-del', 'ap-keep']) expect(run(['run', '--agent', approvalAgent, '--goal', 'copy, then drop', '--run-id', id]).code).toBe(0);
      expect(outboxEmails(outbox).map((e) => /Run: (\S+)/.exec(e.text)?.[1]).sort()).toEqual(['ap-del', 'ap-keep']);
      expect(run(['reject', 'ap-del']).code).toBe(0);
      expect(run(['run', '--agent', approvalAgent, '--run-id', 'ap-del']).code).toBe(0);

      const deleted = run(['delete', 'ap-del']);
      expect(deleted.code, deleted.err).toBe(0);
      expect(deleted.out).toContain('deleted: its checkpoints, step records and idempotency records, 1 approval email in the outbox;');
      // The waiting run's email, with its link, is still there.
      expect(outboxEmails(outbox).map((e) => /Run: (\S+)/.exec(e.text)?.[1])).toEqual(['ap-keep']);
    } finally {
      own.cleanup();
    }
  });
});
