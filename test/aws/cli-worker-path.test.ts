import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import { isTerminal } from '../../lib/core/state.ts';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { runWorker } from '../../lib/engine/worker-loop.ts';
import { silentLogger } from '../../lib/log.ts';
import { systemClock } from '../../lib/ports.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());

/** `stepwise worker --backend aws`: the engine's own worker loop polling SQS through SqsRunQueue. */
describe('runWorker on the AWS runtime', () => {
  it('runs a run to completion from SQS, through a failed attempt and its delayed retry', async () => {
    resources = await createTestResources('cli-worker');
    const runtime = resources.runtime();
    const db = new FakeDatabase();
    const base = writeRowsAgent(db);
    let failOnce = true;
    const agent = {
      ...base,
      tools: [{ ...base.tools[0]!, run: async (input: unknown, context: Parameters<typeof base.tools[0]['run']>[1]) => {
        if (context.step === 2 && failOnce) { failOnce = false; throw new Error('lock timeout'); }
        return base.tools[0]!.run(input, context);
      } }],
    };
    const model = new ScriptedModel({ steps: 3 });
    const runId = await startTestRun(runtime, agent, 'cli-run');
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model, agent,
      clock: systemClock, workerId: 'cli-worker', codeVersion: 'test', log: silentLogger,
    };
    const stop = new AbortController();
    await runWorker(deps, runtime.queue, {
      signal: stop.signal, waitMs: 1000, visibilityMs: 10_000,
      onHandled: () => {
        void runtime.store.load(runId).then((s) => { if (s && isTerminal(s.status)) stop.abort(); });
      },
      idleExitMs: 15_000,
    });
    // The last message may still be settling: wait for the run's end as the store reports it.
    for (let i = 0; i < 50 && !isTerminal((await runtime.store.load(runId))!.status); i++) await new Promise((r) => setTimeout(r, 100));
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state.status).toBe('completed');
    expect(state.steps.map((s) => s.workerId)).toEqual(['cli-worker', 'cli-worker', 'cli-worker']);
    for (let n = 1; n <= 3; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
    const history = await runtime.store.history(runId);
    expect(history.some((h) => h.step === 1 && !h.tool && h.status === 'running')).toBe(true); // the failed attempt
    expect(model.callsFor(2)).toBe(1);
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
  });

  it('stops while it long-polls an empty queue, where the poll held it up to 20 s', async () => {
    resources = await createTestResources('cli-worker-stop');
    const runtime = resources.runtime();
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue,
      model: new ScriptedModel({ steps: 1 }), agent: writeRowsAgent(new FakeDatabase()),
      clock: systemClock, workerId: 'cli-worker', codeVersion: 'test', log: silentLogger,
    };
    const stop = new AbortController();
    const working = runWorker(deps, runtime.queue, { signal: stop.signal, waitMs: 20_000, visibilityMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    stop.abort();
    // The test's 12 s timeout fails it if the worker waits out its 20 s poll.
    await working;
  }, 12_000);

  it('`stepwise worker --backend aws` names a refused permission and what to change, then finishes the run once it passes', { timeout: 60_000 }, async () => {
    resources = await createTestResources('cli-worker-refused');
    const started = await stepwiseCli([
      'start', '--agent', join(ROOT, 'test/aws/fixture-agent.ts'), '--goal', 'echo twice', '--run-id', 'refused-1',
      '--backend', 'aws', '--table', resources.tableName, '--bucket', resources.bucketName, '--queue-url', resources.queueUrl,
    ], { ANTHROPIC_API_KEY: '' });
    expect(started.code, started.err).toBe(0);
    const worker = await stepwiseCli([
      'worker', '--agent', join(ROOT, 'test/aws/fixture-agent.ts'), '--idle-exit-ms', '8000', '--log', 'json',
      '--backend', 'aws', '--table', resources.tableName, '--bucket', resources.bucketName, '--queue-url', resources.queueUrl,
    ], { STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', NODE_OPTIONS: `--import ${join(ROOT, 'test/aws/refuse-first-commit.mjs')}` });
    expect(worker.code, worker.err).toBe(0);
    const errors = worker.err.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === 'step-error');
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({
      refused: 'permission',
      msg: 'step did not finish: the AWS identity may not make this call: allow it in the identity\'s IAM policy (or the resource\'s policy); the message is delivered again until this is mended',
    });
    expect(errors[0]!.error).toContain('is not authorized to perform: dynamodb:PutItem');
    // The refusal passed (the preload refuses once): the run went on from its recorded step.
    expect(worker.out).toMatch(/^run refused-1 v\d+ {2}completed after 2 steps: echoed twice$/m);
  });
});
