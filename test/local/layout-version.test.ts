import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { cliExitCode } from '../../lib/cli/main.ts';
import type { Handled } from '../../lib/engine/handle-message.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { LAYOUT_VERSION, openDatabaseToRead } from '../../lib/local/database.ts';
import { NewerLayoutError, stopsLocalWorker } from '../../lib/local/newer-layout.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';
import { keyCheckpointsAsBefore } from '../support/old-files.ts';
import { META, newState, recordFor, stateAfter } from '../support/states.ts';

const layoutOf = (path: string) => {
  const file = new Database(path, { readonly: true });
  try {
    return { layout: file.pragma('user_version', { simple: true }), tables: file.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all() };
  } finally {
    file.close();
  }
};

/** A file this code wrote, holding run r with `steps` steps. */
async function fileWithRun(path: string, steps = 0): Promise<void> {
  const runtime = openLocalRuntime({ dbPath: path, clock: new ManualClock() });
  await runtime.store.create(newState('r'), META);
  for (let n = 1; n <= steps; n++) await runtime.store.commit({ runId: 'r', expectedVersion: n, state: stateAfter('r', n), appended: recordFor('r', n), ...META });
  runtime.close();
}

/** The file as an older release leaves it, and its workers still use it: checkpoints keyed (run_id, version), no stamp. */
function asOlderRelease(path: string): void {
  keyCheckpointsAsBefore(path);
  const unstamped = new Database(path);
  unstamped.pragma('user_version = 0');
  unstamped.close();
}

describe("the SQLite file's layout version", () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('is stamped on a new file, and on an older file once it is brought to this layout', async () => {
    db = tempDb();
    await fileWithRun(db.path);
    expect(layoutOf(db.path).layout).toBe(LAYOUT_VERSION);

    asOlderRelease(db.path);
    openLocalRuntime({ dbPath: db.path }).close();
    expect(layoutOf(db.path).layout).toBe(LAYOUT_VERSION);
  });

  it('refuses a file of a newer layout before writing anything to it, and the CLI says so in one line (exit 2)', async () => {
    db = tempDb();
    await fileWithRun(db.path);
    // A newer release's file: stamped past this code's layout, an index of ours gone from it.
    const newer = new Database(db.path);
    newer.exec('DROP INDEX runs_by_wait_event');
    newer.pragma(`user_version = ${LAYOUT_VERSION + 1}`);
    newer.close();
    const before = layoutOf(db.path);

    expect(() => openLocalRuntime({ dbPath: db.path })).toThrow(InvalidInputError);
    expect(() => openLocalRuntime({ dbPath: db.path })).toThrow(`has layout ${LAYOUT_VERSION + 1}, written by a newer stepwise release; this one reads layouts up to ${LAYOUT_VERSION}`);
    for (const args of [['status'], ['worker', '--agent', join(ROOT, 'test/support/process-agent.ts')]]) {
      const cli = await stepwiseCli([...args, '--db', db.path], { STEPWISE_LOG_FORMAT: 'json' });
      expect(cli.code).toBe(2);
      expect(cli.err.trim().split('\n')).toEqual([expect.stringMatching(/^stepwise: the database .* has layout \d+, written by a newer stepwise release/)]);
    }
    expect(layoutOf(db.path)).toEqual(before);
  });

  it('is left as it is by the commands that only read: an older file is read from a copy brought forward in memory', async () => {
    db = tempDb();
    await fileWithRun(db.path, 2);
    asOlderRelease(db.path);
    const before = layoutOf(db.path);

    const cli = (args: string[]) => stepwiseCli([...args, '--db', db.path], { STEPWISE_LOG_FORMAT: 'json' });
    const status = await cli(['status']);
    expect(status.code).toBe(0);
    expect(status.out).toMatch(/^r +running +2 +3 +test-agent/m);
    const history = await cli(['history', 'r']);
    expect(history.code).toBe(0);
    expect(history.out.split('\n').filter((line) => /^\d+ /.test(line))).toHaveLength(3);
    const show = await cli(['show', 'r', '--json']);
    expect(show.code).toBe(0);
    expect(JSON.parse(show.out)).toMatchObject({ runId: 'r', version: 3, step: 2 });
    const drift = await cli(['drift', '--agent', join(ROOT, 'test/support/process-agent.ts')]);
    expect(drift.code).toBe(0);
    expect(layoutOf(db.path)).toEqual(before);

    // watch reads the copy too, taken once: a run still moving in it would never move, so it is refused,
    // saying why (the run's own lines and nothing more, until stopped, were all it printed).
    const watch = await cli(['watch', 'r']);
    expect(watch.code).toBe(2);
    expect(watch.out).toBe('');
    expect(watch.err.trim()).toBe(`stepwise: run r is running in ${db.path}, a file of an older layout that this release reads from a copy taken once, in which it would never move (the older release's workers are still on it): watch it with that release, or once a worker of this release has brought the file to this layout`);
    expect(layoutOf(db.path)).toEqual(before);

    // The first command that may write brings the file forward, as before.
    openLocalRuntime({ dbPath: db.path }).close();
    expect(layoutOf(db.path).layout).toBe(LAYOUT_VERSION);
  });

  it('of an older file too large to read from a copy in memory: refused, unchanged, with what brings it forward', async () => {
    db = tempDb();
    await fileWithRun(db.path);
    asOlderRelease(db.path);
    const before = layoutOf(db.path);
    // A limit of one page stands for a file of gigabytes.
    let refusal: unknown;
    try {
      openDatabaseToRead(db.path, 4096).close();
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(InvalidInputError);
    expect((refusal as Error).message).toMatch(/has an older layout, which this release reads from a copy in memory, and at \d+ MB it is too large to copy; once the older release's workers are stopped, a worker of this release brings the file to this layout$/);
    expect(layoutOf(db.path)).toEqual(before);
    // Under the limit, the same file is read from its copy.
    const copy = openDatabaseToRead(db.path);
    expect(copy.prepare('SELECT count(*) AS n FROM runs').get()).toEqual({ n: 1 });
    copy.close();
  });

  it('brought forward by a newer release while a worker of this one runs: the worker writes nothing more, applies no effect, and stops in one line (exit 2)', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const rows = new FakeRows();
    const model = new StubModel(writeRowsScript(4));
    const a = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model, clock, workerId: 'A' });
    try {
      await start(a.deps, 'write 4 rows', 'r');
      let handled = 0;
      const worker = runWorker(a.deps, a.runtime.queue, {
        visibilityMs: VISIBILITY_MS, waitMs: 0, sweepEveryMs: 0, stopOn: stopsLocalWorker,
        onHandled: (h: Handled) => {
          // After step 1, a newer release's first process opens the file and brings it to its layout.
          if (++handled === 1) {
            const newer = new Database(db.path);
            newer.pragma(`user_version = ${LAYOUT_VERSION + 1}`);
            newer.close();
          }
          return h.action === 'ack' && h.outcome?.kind === 'advanced' && h.outcome.state.status === 'completed';
        },
      });
      let stopped: unknown;
      await worker.catch((error: unknown) => { stopped = error; });
      expect(stopped).toBeInstanceOf(NewerLayoutError);
      expect((stopped as Error).message).toBe(`the database ${db.path} was brought to layout ${LAYOUT_VERSION + 1} by a newer stepwise release while this process had it open; this one reads layouts up to ${LAYOUT_VERSION}, so it writes nothing more to it (this write was not kept): stop this release's workers, and work the file with that release or a newer one`);
      expect(cliExitCode(stopped)).toBe(2);
      // Step 2's decision, written before its tool runs, was refused: no effect, no checkpoint past step 1.
      expect(rows.received).toEqual(['r/step-1']);
      expect(await loadState(a.runtime, 'r')).toMatchObject({ status: 'running', step: 1 });
      expect((await a.runtime.store.history('r')).map((h) => h.version)).toEqual([1, 2]);
      // The message it held is handed back for the newer release's workers, its receive uncounted.
      expect(a.runtime.db.prepare("SELECT receipt, receive_count FROM queue WHERE run_id = 'r'").get()).toEqual({ receipt: null, receive_count: 0 });
    } finally {
      a.runtime.close();
    }
  });
});
