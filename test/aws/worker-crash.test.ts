import { afterEach, describe, expect, it } from 'vitest';
import type { AwsRuntime } from '../../lib/aws/runtime.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { idempotencyKey } from '../../lib/core/keys.ts';
import type { RunState } from '../../lib/core/state.ts';
import type { CrashPoint } from '../../lib/engine/deps.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, pollOnce, type PollResult } from './lambda-harness.ts';
import { FakeDatabase, ScriptedModel, writeRowsAgent } from './write-rows-agent.ts';

/**
 * The seed's crash tests and crash points C1-C8, through the Lambda handler with real SQS messages from
 * fauxqs and checkpoints in DynamoDB Local. A crash kills the simulated Lambda container at that point:
 * none of its later AWS calls happen, Lambda deletes nothing, and the message comes back.
 */

const STEPS = 4;
let resources: TestResources | undefined;
afterEach(() => resources?.close());

async function setup(label: string, options: { outputBytes?: (step: number) => number } = {}) {
  resources = await createTestResources(label);
  const db = new FakeDatabase();
  const model = new ScriptedModel({ steps: STEPS });
  const agent = writeRowsAgent(db, options);
  const runtime = resources.runtime();
  const runId = await startTestRun(runtime, agent, `${label}-run`);
  return { resources, db, model, agent, runtime, runId };
}

async function finalState(runtime: AwsRuntime, runId: string): Promise<RunState> {
  return decodeState((await runtime.store.load(runId))!);
}

/** Every step applied once, recorded once, in order, with no version missing; the run completed. */
async function expectCleanCompletion(runtime: AwsRuntime, db: FakeDatabase, runId: string): Promise<void> {
  const state = await finalState(runtime, runId);
  expect(state.status).toBe('completed');
  expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3, 4]);
  expect(db.rowCount).toBe(STEPS);
  for (let n = 1; n <= STEPS; n++) expect(db.applied.get(idempotencyKey(runId, n))).toBe(1);
  const history = await runtime.store.history(runId);
  expect(history.map((h) => h.version)).toEqual(Array.from({ length: history.length }, (_, i) => i + 1));
  expect(history.filter((h) => h.tool).map((h) => h.step)).toEqual([1, 2, 3, 4]);
  for (let i = 1; i < history.length; i++) expect(history[i]!.step - history[i - 1]!.step).toBeGreaterThanOrEqual(0);
  expect(history.at(-1)).toMatchObject({ status: 'completed', step: STEPS });
}

describe('seed crash tests through the SQS worker handler', () => {
  it('test 1: raises after step 2\'s checkpoint; a new container resumes the same run at step 3', async () => {
    const { resources, db, model, agent, runtime, runId } = await setup('seed1');
    const { workers, polls } = await driveRun({
      resources, runId,
      spawn: (n) => new WorkerProcess({ resources, agent, model, ...(n === 0 ? { crash: { point: 'C6', step: 2 } } : {}) }),
      // The crashed message comes back when its real visibility timeout runs out.
      poll: { visibilitySeconds: 1, realTimeouts: true, waitSeconds: 2 },
    });
    expect(workers).toHaveLength(2);
    expect(workers[0]!.crashed).toBe(true);
    expect(db.receivedCount(`${runId}/step-1`)).toBe(1);
    expect(db.receivedCount(`${runId}/step-2`)).toBe(1);
    // Resumed from step 3: the model was never asked for steps 1 or 2 again.
    expect(model.calls).toEqual([1, 2, 3, 4, 5]);
    const state = await finalState(runtime, runId);
    const crashedRequest = polls.find((p) => p.crashed)!.requestId;
    expect(state.steps[1]!.workerId).toBe(crashedRequest);
    expect(state.steps[2]!.workerId).not.toBe(crashedRequest);
    await expectCleanCompletion(runtime, db, runId);
  });

  it('test 2: raises after step 3\'s tool call, before its checkpoint; the retry brings the same key and applies nothing', async () => {
    const { resources, db, model, agent, runtime, runId } = await setup('seed2');
    let worker = new WorkerProcess({ resources, agent, model, crash: { point: 'C4', step: 3 } });
    let result: PollResult;
    do result = await pollOnce(resources.clients, resources.queueUrl, worker); while (!result.crashed);
    worker.close();
    const key = `${runId}/step-3`;
    expect(db.receivedCount(key)).toBe(1);
    const rowsAtCrash = db.rowCount;
    expect(rowsAtCrash).toBe(3);

    worker = new WorkerProcess({ resources, agent, model });
    try {
      const retry = await pollOnce(resources.clients, resources.queueUrl, worker);
      expect(retry.failures).toEqual([]);
      expect(db.receivedCount(key)).toBe(2);
      expect(db.applied.get(key)).toBe(1);
      expect(db.rowCount).toBe(rowsAtCrash);
      // The recorded decision was reused: the model was asked for step 3 once.
      expect(model.callsFor(3)).toBe(1);
    } finally {
      worker.close();
    }
    await driveRun({ resources, runId, spawn: () => new WorkerProcess({ resources, agent, model }) });
    await expectCleanCompletion(runtime, db, runId);
  });
});

describe('crash points C1-C8 through the SQS worker handler', () => {
  // The model is asked twice for step 2 only when the crash came after its answer and before the
  // decision was recorded; the tool runs twice only when the crash came after it and before the
  // checkpoint. Either way each effect is applied once.
  const expectations: Record<CrashPoint, { modelCalls: number; toolCalls: number }> = {
    C1: { modelCalls: 1, toolCalls: 1 },
    C2: { modelCalls: 2, toolCalls: 1 },
    C3: { modelCalls: 1, toolCalls: 1 },
    C4: { modelCalls: 1, toolCalls: 2 },
    C5: { modelCalls: 1, toolCalls: 2 },
    C6: { modelCalls: 1, toolCalls: 1 },
    C7: { modelCalls: 1, toolCalls: 1 },
    C8: { modelCalls: 1, toolCalls: 1 },
  };

  for (const [point, expected] of Object.entries(expectations) as [CrashPoint, { modelCalls: number; toolCalls: number }][]) {
    it(`${point} in step 2: every effect once, a dense history, the run completes`, async () => {
      // Step 2 returns a large output, so it passes C5 (the blob upload) too.
      const { resources, db, model, agent, runtime, runId } = await setup(`crash-${point.toLowerCase()}`, { outputBytes: (step) => (step === 2 ? 20_000 : 0) });
      const { workers } = await driveRun({
        resources, runId,
        spawn: (n) => new WorkerProcess({ resources, agent, model, ...(n === 0 ? { crash: { point, step: 2 } } : {}) }),
      });
      expect(workers).toHaveLength(2);
      expect(workers[0]!.crashed).toBe(true);
      expect(model.callsFor(2)).toBe(expected.modelCalls);
      expect(db.receivedCount(`${runId}/step-2`)).toBe(expected.toolCalls);
      await expectCleanCompletion(runtime, db, runId);
      const step2 = (await finalState(runtime, runId)).steps[1]!;
      expect(step2.result.ref).toMatch(/^sha256:/);
      expect((await runtime.blobs.get(step2.result.ref!))?.length).toBe(step2.result.bytes);
      expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(0);
    });
  }
});
