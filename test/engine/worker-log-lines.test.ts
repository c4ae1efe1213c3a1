import { afterEach, describe, expect, it } from 'vitest';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { captureLogs } from '../aws/log-capture.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, VISIBILITY_MS, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

/**
 * A step that did not finish is an error an operator looks into, by its run: the line named the run only
 * inside the message body's text, so a search of the logs for the run (runId = "...") missed it, where the
 * Lambda's delivery-error names it.
 */
describe('worker loop log lines', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  it('name the run and version of a step that did not finish', async () => {
    db = tempDb();
    const w = workerProcess({ dbPath: db.path, agent: rowsAgent(new FakeRows()), model: new StubModel(writeRowsScript(2)), clock: new ManualClock(), workerId: 'A', crashAt: { point: 'C6', step: 1 } });
    const { log, lines } = captureLogs();
    w.deps.log = log;
    await start(w.deps, 'write 2 rows', 'lost-1');
    await runWorker(w.deps, w.runtime.queue, { visibilityMs: VISIBILITY_MS, waitMs: 0, idleExitMs: 0, sweepEveryMs: 0 });
    expect(lines.find((l) => l.event === 'step-error')).toMatchObject({ level: 50, runId: 'lost-1', version: 1, workerId: 'A' });
    w.runtime.close();
  });
});
