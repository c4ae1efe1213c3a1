import { afterEach, describe, expect, it } from 'vitest';
import { benchAgent } from '../../bench/aws-support.ts';
import { missingSteps } from '../../bench/support.ts';
import { advance } from '../../lib/engine/advance.ts';
import { ManualClock, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { pruneCheckpointRow } from '../support/local-records.ts';

/** The throughput bench's agent on a real SQLite runtime: two runs of 4 steps, one drained, one not. */
async function twoRuns(db: ReturnType<typeof tempDb>) {
  const { agent, model } = benchAgent({ steps: 4 });
  const clock = new ManualClock();
  const w = workerProcess({ dbPath: db.path, agent, model: model(), clock, workerId: 'A' });
  await start(w.deps, 'go', 'done');
  await drain(w.deps, w.runtime, clock);
  return { ...w, clock };
}

describe('the throughput check (missingSteps)', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('passes runs that completed every step once', async () => {
    db = tempDb();
    const { runtime } = await twoRuns(db);
    expect(await missingSteps(runtime.store, ['done'], 4)).toEqual([]);
    runtime.close();
  });

  it('flags a run left halfway, a run that never started and a missing checkpoint version', async () => {
    db = tempDb();
    const { runtime, deps } = await twoRuns(db);
    await start(deps, 'go', 'half');
    await advance(deps, 'half');
    await advance(deps, 'half');
    // The row goes, its step's record kept (where a pruned row's goes): only the history shows the gap.
    pruneCheckpointRow(runtime.db, 'done', 2);
    const problems = await missingSteps(runtime.store, ['done', 'half', 'never'], 4);
    expect(problems).toEqual([
      expect.stringMatching(/^done: versions 1,3,4/),
      'half: running at step 2',
      'half: 2 of 4 steps',
      'never: no checkpoint',
    ]);
    // A row lost with its record: the run is unreadable, and said so.
    runtime.db.prepare('DELETE FROM checkpoints WHERE run_id = ? AND version = 3').run('done');
    expect(await missingSteps(runtime.store, ['done'], 4)).toEqual([expect.stringMatching(/^done: checkpoint \d+ of run done is unreadable: head says 4 steps, found 3/)]);
    runtime.close();
  });
});
