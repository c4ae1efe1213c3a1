import { ChangeMessageVisibilityCommand } from '@aws-sdk/client-sqs';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { HeldEffect } from '../contract/idempotency-ledger-contract.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { createTestResources, startTestRun, type TestResources } from './aws-fixtures.ts';
import { WorkerProcess, driveRun, receiveOneRecord, sqsEvent } from './lambda-harness.ts';
import { captureLogs } from './log-capture.ts';
import { ScriptedModel } from './write-rows-agent.ts';

let resources: TestResources | undefined;
afterEach(() => resources?.close());


describe('ctx.once through the Lambda handler', () => {
  it('a container that died inside ctx.once: the next invocation hides the message until the lease ends and counts no failure; a later one completes the step', async () => {
    resources = await createTestResources('once-lambda');
    const res = resources;
    // Starts at the real time: history rows written on this clock must not look expired to the store.
    const clock = new ManualClock(Date.now());
    const entries: { at: number; held: HeldEffect; attempt: number }[] = [];
    let entered!: () => void;
    const firstEntered = new Promise<void>((resolve) => { entered = resolve; });
    let auto = false;
    const agent = defineAgent({
      name: 'once-lambda', tools: [tool({
        name: 'write_row', description: 'writes a row through ctx.once', input: z.object({ batch: z.number() }), sideEffect: true,
        run: (input, ctx) => ctx.once(async () => {
          const held = new HeldEffect();
          entries.push({ at: clock.now(), held, attempt: ctx.attempt });
          entered();
          return auto ? `wrote row ${input.batch}` : held.effect();
        }),
      })],
    });
    const model = new ScriptedModel({ steps: 1 });
    const runtime = res.runtime();
    const runId = await startTestRun(runtime, agent, 'once-lambda-run');
    const receive = () => receiveOneRecord(res);
    const showNow = (receiptHandle: string) => res.clients.sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: res.queueUrl, ReceiptHandle: receiptHandle, VisibilityTimeout: 0 }));

    // Container A starts the effect and dies inside it (a Lambda timeout, an out-of-memory kill).
    const deadClock = clock.process();
    const a = new WorkerProcess({ resources: res, agent, model, clock: deadClock });
    const first = await receive();
    void a.handler(sqsEvent([first]), { awsRequestId: 'A' }).catch(() => undefined);
    await firstEntered;
    deadClock.kill();
    a.dead = true;
    a.close();
    // Its message comes back (at once here, instead of after the visibility timeout).
    await showNow(first.receiptHandle);
    clock.advance(10_000);

    const { log, lines } = captureLogs();
    const b = new WorkerProcess({ resources: res, agent, model, clock: clock.process(), log });
    const hidden: number[] = [];
    (b.clients.sqs.middlewareStack as { add(middleware: any, options: any): void }).add(
      (next: (args: { input: { VisibilityTimeout?: number } }) => Promise<unknown>, context: { commandName?: string }) => async (args: { input: { VisibilityTimeout?: number } }) => {
        if (context.commandName === 'ChangeMessageVisibilityCommand') hidden.push(args.input.VisibilityTimeout!);
        return next(args);
      },
      { step: 'initialize', name: `visibility-${randomUUID()}` },
    );
    const second = await receive();
    expect(second.attributes.ApproximateReceiveCount).toBe('2');
    const response = await b.handler(sqsEvent([second]), { awsRequestId: 'B' });
    b.close();

    // B handed the message back for the rest of A's lease (50 s) plus the margin, and wrote nothing.
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: second.messageId }]);
    expect(hidden).toEqual([51]);
    expect(lines).toContainEqual(expect.objectContaining({ event: 'idempotency-key-busy', runId, key: `${runId}/step-1` }));
    const waiting = (await runtime.store.load(runId))!;
    expect(waiting.version).toBe(1);
    expect(decodeState(waiting)).toMatchObject({ status: 'running', failures: 0 });
    expect(entries).toHaveLength(1);

    // The lease ends; the message comes back (at once here) and the step runs again, once.
    clock.advance(51_000);
    await showNow(second.receiptHandle);
    auto = true;
    // The next container watches the dead claim on its own time before it takes it over.
    await clock.settle(driveRun({ resources: res, runId, spawn: () => new WorkerProcess({ resources: res, agent, model, clock: clock.process() }), poll: { waitSeconds: 2 } }));
    const state = decodeState((await runtime.store.load(runId))!);
    expect(state).toMatchObject({ status: 'completed', failures: 0 });
    expect(state.steps[0]?.result.text).toBe('wrote row 1');
    expect(entries).toHaveLength(2);
    expect(entries[1]!.at).toBeGreaterThanOrEqual(entries[0]!.at + 60_000);
    // B's wait for the lease was no try of the step: the one that ran the effect again is the second.
    expect(entries.map((e) => e.attempt)).toEqual([1, 2]);
    expect((await runtime.store.history(runId)).map((h) => h.version)).toEqual([1, 2, 3]);
  });
});
