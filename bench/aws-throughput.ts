/**
 * Steps per second through the SQS worker handler against DynamoDB Local + fauxqs, next to the SQLite
 * runtime (openLocalRuntime + runWorker) in the same process, same agent, same instant model. Local
 * servers on one machine: the figure shows the runtime's own overhead and its shape (calls per step),
 * not what AWS's network would give. Printed, never asserted.
 *
 *   node --import tsx bench/aws-throughput.ts [runs] [steps-per-run]
 */
import { join } from 'node:path';
import { decodeState } from '../lib/core/codec.ts';
import { startRun } from '../lib/engine/start.ts';
import { runWorker } from '../lib/engine/worker-loop.ts';
import { silentLogger } from '../lib/log.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { systemClock } from '../lib/ports.ts';
import { createTestResources, startTestRun } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { benchAgent } from './aws-support.ts';
import { tempDir } from './support.ts';

const RUNS = Number(process.argv[2] ?? 8);
const STEPS = Number(process.argv[3] ?? 20);

async function awsCase(runs: number, batch: number): Promise<number> {
  const resources = await createTestResources('bench-throughput');
  try {
    const { agent, model } = benchAgent({ steps: STEPS });
    const runtime = resources.runtime();
    const ids: string[] = [];
    for (let r = 0; r < runs; r++) ids.push(await startTestRun(runtime, agent, `aws-${r}`));
    const worker = new WorkerProcess({ resources, agent, model: model() });
    const t0 = process.hrtime.bigint();
    let handled = 0;
    // One container taking batches of up to `batch` messages: a batch holds at most one message per
    // run (FIFO groups), and the handler advances different runs in parallel.
    while (handled < runs * (STEPS + 1)) handled += (await pollOnce(resources.clients, resources.queueUrl, worker, { max: batch, waitSeconds: 1 })).records.length;
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    worker.close();
    for (const id of ids) if (decodeState((await runtime.store.load(id))!).status !== 'completed') throw new Error(`${id} did not complete`);
    return (runs * STEPS) / seconds;
  } finally {
    resources.close();
  }
}

async function sqliteCase(runs: number): Promise<number> {
  const { dir, cleanup } = tempDir();
  const runtime = openLocalRuntime({ dbPath: join(dir, 'throughput.db') });
  try {
    const { agent, model } = benchAgent({ steps: STEPS });
    const deps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model: model(), agent,
      clock: systemClock, workerId: 'bench', codeVersion: 'bench', log: silentLogger,
    };
    for (let r = 0; r < runs; r++) await startRun(deps, { goal: 'bench', runId: `sqlite-${r}` });
    let handled = 0;
    const t0 = process.hrtime.bigint();
    await runWorker(deps, runtime.queue, { waitMs: 0, onHandled: () => ++handled >= runs * (STEPS + 1) });
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    return (runs * STEPS) / seconds;
  } finally {
    runtime.close();
    cleanup();
  }
}

const stopServers = await useAwsServers();
try {
  console.log(`steps per second, ${STEPS}-step runs, instant model, half the steps side-effecting (decision + ledger):`);
  const rows: [string, number][] = [
    ['SQLite runtime, runWorker, 1 run', await sqliteCase(1)],
    ['AWS handler (DynamoDB Local + fauxqs), 1 run, batch 1', await awsCase(1, 1)],
    [`SQLite runtime, runWorker, ${RUNS} runs`, await sqliteCase(RUNS)],
    [`AWS handler, ${RUNS} runs, batch 1`, await awsCase(RUNS, 1)],
    [`AWS handler, ${RUNS} runs, batch 10 (runs in parallel)`, await awsCase(RUNS, 10)],
  ];
  for (const [name, rate] of rows) console.log(`  ${name.padEnd(58)} ${rate.toFixed(1).padStart(7)} steps/s`);
} finally {
  await stopServers();
}
