import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StaleVersionError } from '../../lib/core/errors.ts';
import { cliErrorLine } from '../../lib/cli/main.ts';
import { createHttpApp } from '../../lib/http/app.ts';
import { silentLogger } from '../../lib/log.ts';
import type { CheckpointStore } from '../../lib/ports.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { listen } from '../support/http-app.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { ApprovalFlowModel, waitAgent } from '../support/wait-agent.ts';

/**
 * A request that loses to the run at each of its tries (a worker's step or another answer written first
 * every time: a run that moves faster than the request reads it, a fault no server makes on cue, so the
 * store's commit alone is made to lose here) was a 500 "internal error", and the CLI printed the store's
 * "stale write ... no longer the latest".
 */
describe('a request the run moved on under at each try', () => {
  const db = tempDb();
  const clock = new ManualClock();
  const worker = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), []), model: new ApprovalFlowModel(), clock, workerId: 'w' });
  let commits = 0;
  const store: CheckpointStore = Object.assign(Object.create(worker.runtime.store) as CheckpointStore, {
    commit: async (write: Parameters<CheckpointStore['commit']>[0]) => { commits++; throw new StaleVersionError(write.runId, write.expectedVersion); },
  });
  let url = '';
  let close = async () => {};
  beforeAll(async () => {
    await start(worker.deps, 'copy, then drop old_rows with approval', 'moving');
    await workVisible(worker.deps, worker.runtime);
    expect((await worker.runtime.store.load('moving'))!.status).toBe('waiting');
    const app = createHttpApp({
      store, blobs: worker.runtime.blobs, queue: worker.runtime.queue, clock, workerId: 'api',
      codeVersion: 'test', log: silentLogger, agent: worker.deps.agent, signingKey: async () => Buffer.alloc(32, 1), apiToken: 'token',
    });
    ({ url, close } = await listen(app));
  });
  afterAll(async () => {
    await close();
    worker.runtime.close();
    db.cleanup();
  });

  it('is a 409 that says the run moved on and to look and ask again, not a 500; the CLI says the same', async () => {
    const response = await fetch(`${url}/runs/moving/cancel`, {
      method: 'POST', headers: { authorization: 'Bearer token', 'content-type': 'application/json' }, body: JSON.stringify({ by: 'ops@example.com' }),
    });
    expect(response.status).toBe(409);
    const body = await response.json() as { error: string; runId: string };
    expect(body).toEqual({
      runId: 'moving',
      error: expect.stringMatching(/^run moving moved on under this request at each of its tries \(a step or an answer was written first, the last at version \d+ or later\): look at the run, and ask again if it still applies$/),
    });
    // It did try, each time against the version it had just read.
    expect(commits).toBeGreaterThan(1);
    expect((await worker.runtime.store.load('moving'))!.status).toBe('waiting');
    expect(cliErrorLine(new StaleVersionError('moving', 4))).toBe(body.error.replace(/version \d+/, 'version 5'));
  });
});
