/**
 * Time from an approval POST to the run's next step starting, on the SQLite runtime (stepwise serve's app
 * over a real socket, a worker loop polling the local queue) and on the AWS path (the API Gateway handler,
 * SQS on fauxqs, the worker Lambda handler fed by an event-source loop, DynamoDB Local). The baseline in
 * the same run: the time from one ordinary step's checkpoint to the next step starting on the same worker.
 * Printed, never asserted.
 *
 *   node --import tsx bench/approval-latency.ts [approvals]
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import { handle } from 'hono/aws-lambda';
import { z } from 'zod';
import { defineAgent, tool } from '../lib/agent.ts';
import { decodeState } from '../lib/core/codec.ts';
import type { CrashPoint, EngineDeps } from '../lib/engine/deps.ts';
import { startRun } from '../lib/engine/start.ts';
import { runWorker } from '../lib/engine/worker-loop.ts';
import { createHttpApp } from '../lib/http/app.ts';
import { silentLogger } from '../lib/log.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { systemClock, type CheckpointStore, type Model, type ModelReply } from '../lib/ports.ts';
import { signApproval } from '../lib/waits/approval-token.ts';
import { requestApproval } from '../lib/waits/tools.ts';
import { createTestResources, startTestRun } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { benchCounts } from './args-support.ts';
import { fmt, median, tempDir } from './support.ts';

const [APPROVALS] = benchCounts([{ name: 'approvals', fallback: 10 }]) as [number];
const APPROVER = 'ops@example.com';
const key = randomBytes(32);

const agent = defineAgent({
  name: 'approval-bench', settings: { stepCap: 10 },
  tools: [
    requestApproval({ approvers: [APPROVER] }),
    tool({ name: 'noop', description: 'does nothing', input: z.object({}), sideEffect: false, run: () => 'ok' }),
  ],
});
// Step 1 asks for approval, step 2 and 3 are ordinary steps, then DONE.
const model: Model = {
  name: 'bench',
  decide: async (request): Promise<ModelReply> => request.step === 1
    ? { kind: 'tool', tool: 'request_approval', input: { request: 'go?' } }
    : request.step <= 3 ? { kind: 'tool', tool: 'noop', input: {} } : { kind: 'done', summary: 'done' },
};

/** Marks when each step of each run passes C1 (begins) and C6 (its checkpoint is written). */
function probeTimes() {
  const at = new Map<string, bigint>();
  const probe = (point: CrashPoint, where: { runId: string; step: number }) => { if (point === 'C1' || point === 'C6') at.set(`${where.runId}/${point}/${where.step}`, process.hrtime.bigint()); };
  const when = async (id: string): Promise<bigint> => {
    for (;;) {
      const t = at.get(id);
      if (t !== undefined) return t;
      await new Promise((r) => setTimeout(r, 1));
    }
  };
  return { probe, when };
}

async function waitingWait(store: CheckpointStore, runId: string): Promise<{ id: string; deadline: number }> {
  for (;;) {
    const stored = await store.load(runId);
    if (stored?.status === 'waiting') return decodeState(stored).wait!;
    await new Promise((r) => setTimeout(r, 5));
  }
}

const ms = (a: bigint, b: bigint) => Number(b - a) / 1e6;
const form = (decision: string) => ({ method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `decision=${decision}` });

async function localCase(): Promise<{ approval: number[]; step: number[] }> {
  const { dir, cleanup } = tempDir();
  const runtime = openLocalRuntime({ dbPath: join(dir, 'latency.db') });
  const times = probeTimes();
  const deps: EngineDeps = {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model, agent, clock: systemClock,
    workerId: 'bench', codeVersion: 'bench', log: silentLogger, probe: times.probe,
  };
  const app = createHttpApp({ ...deps, workerId: 'api', signingKey: async () => key, events: runtime.events });
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
  await new Promise<void>((r) => server.once('listening', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const stop = new AbortController();
  const worker = runWorker(deps, runtime.queue, { signal: stop.signal, waitMs: 1000 });
  const approval: number[] = [];
  const step: number[] = [];
  try {
    for (let i = 0; i < APPROVALS; i++) {
      const runId = `local-${i}`;
      await startRun(deps, { goal: 'bench', runId });
      const wait = await waitingWait(runtime.store, runId);
      const token = signApproval({ runId, waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline }, key);
      const t0 = process.hrtime.bigint();
      const response = await fetch(`${url}/approvals/${token}`, form('approve'));
      if (response.status !== 200) throw new Error(`approval answered ${response.status}`);
      approval.push(ms(t0, await times.when(`${runId}/C1/2`)));
      step.push(ms(await times.when(`${runId}/C6/2`), await times.when(`${runId}/C1/3`)));
    }
  } finally {
    stop.abort();
    await worker;
    server.close();
    runtime.close();
    cleanup();
  }
  return { approval, step };
}

async function awsCase(): Promise<{ approval: number[]; step: number[] }> {
  const resources = await createTestResources('bench-approval');
  const times = probeTimes();
  const worker = new WorkerProcess({ resources, agent, model });
  // A handler over that container's runtime, with a probe that only notes the time.
  const { createSqsWorkerHandler } = await import('../lib/aws/sqs-worker-handler.ts');
  const handler = createSqsWorkerHandler({ runtime: worker.runtime, agent, model, log: silentLogger, codeVersion: 'bench', probe: times.probe });
  const eventSource = { handler, crashed: false };
  const runtime = resources.runtime();
  const app = createHttpApp({
    store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: systemClock, workerId: 'api', codeVersion: 'bench', log: silentLogger,
    agent, signingKey: async () => key,
  });
  const api = handle(app) as unknown as (event: unknown, context: unknown) => Promise<{ statusCode: number }>;
  let polling = true;
  // Lambda's event source: long polls, one batch at a time.
  const source = (async () => { while (polling) await pollOnce(resources.clients, resources.queueUrl, eventSource, { waitSeconds: 1 }); })();
  const approval: number[] = [];
  const step: number[] = [];
  try {
    for (let i = 0; i < APPROVALS; i++) {
      const runId = `aws-${i}-${Date.now()}`;
      await startTestRun(runtime, agent, runId, 'bench');
      const wait = await waitingWait(runtime.store, runId);
      const token = signApproval({ runId, waitId: wait.id, approver: APPROVER, expiresAt: wait.deadline }, key);
      const t0 = process.hrtime.bigint();
      const response = await api({
        version: '2.0', routeKey: '$default', rawPath: `/approvals/${token}`, rawQueryString: '', headers: { host: 'api', 'content-type': 'application/x-www-form-urlencoded' },
        requestContext: { http: { method: 'POST', path: `/approvals/${token}`, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'bench' }, requestId: String(i), routeKey: '$default', stage: '$default', accountId: '0', apiId: 'api', domainName: 'api', domainPrefix: 'api', time: '', timeEpoch: Date.now() },
        body: 'decision=approve', isBase64Encoded: false,
      }, {});
      if (response.statusCode !== 200) throw new Error(`approval answered ${response.statusCode}`);
      approval.push(ms(t0, await times.when(`${runId}/C1/2`)));
      step.push(ms(await times.when(`${runId}/C6/2`), await times.when(`${runId}/C1/3`)));
    }
  } finally {
    polling = false;
    await source;
    worker.close();
    resources.close();
  }
  return { approval, step };
}

async function main(): Promise<void> {
  const stopServers = await useAwsServers();
  try {
    const local = await localCase();
    const aws = await awsCase();
    console.log(`approval POST -> next step starting, ${APPROVALS} approvals each (median, min-max, ms)`);
    const row = (name: string, xs: number[]) => console.log(`  ${name.padEnd(58)} ${fmt(median(xs))}  (${fmt(Math.min(...xs))}-${fmt(Math.max(...xs))})`);
    row('SQLite: approval POST to next step', local.approval);
    row('SQLite baseline: one step checkpoint to the next step', local.step);
    row('AWS path (API handler, SQS, worker handler): approval POST to next step', aws.approval);
    row('AWS path baseline: one step checkpoint to the next step', aws.step);
  } finally {
    await stopServers();
  }
}

await main();
