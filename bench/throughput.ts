/**
 * Steps per second with many runs and 1, 4 and 16 workers, on both runtimes, same agent (aws-support.ts:
 * half the steps side-effecting through ctx.once), instant model:
 *   - SQLite: real worker processes (`stepwise worker`, each its own Node process) on one database file;
 *     the runs are enqueued once every worker has said it is ready, and timed until the last one ends.
 *   - AWS: 1, 4 or 16 WorkerProcess containers (their own SDK clients and handler, one message per
 *     invocation as the stack's batch size of 1) polling one FIFO queue concurrently, on DynamoDB Local +
 *     fauxqs. The containers share this Node process, the servers share the machine.
 * Baselines in the same run: each runtime's 1-worker figure (the scaling factor), and the durable-insert
 * floor of this disk (the most steps per second one SQLite writer could commit). Every run is checked to
 * have completed with every step once. Printed, never asserted.
 *
 *   node --import tsx bench/throughput.ts [runs] [steps-per-run] [workers,...]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startRun } from '../lib/engine/start.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { createTestResources, queueDepth, startTestRun } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { benchAgent } from './aws-support.ts';
import { benchDeps, durableInsertFloor, fmt, missingSteps, tempDir } from './support.ts';

const RUNS = Number(process.argv[2] ?? 32);
const STEPS = Number(process.argv[3] ?? 20);
const WORKERS = (process.argv[4] ?? '1,4,16').split(',').map(Number);
const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const AGENT = join(ROOT, 'bench/throughput-support.ts');

interface Measured { stepsPerSecond: number; problems: string[]; note: string }

const exited = (c: ChildProcess) => new Promise<void>((res) => (c.exitCode !== null || c.signalCode !== null ? res() : c.once('exit', () => res())));

/** One `stepwise worker` process; resolves once it printed its ready line. */
function spawnWorker(dbPath: string): { child: ChildProcess; ready: Promise<void> } {
  const env: NodeJS.ProcessEnv = { ...process.env, THROUGHPUT_STEPS: String(STEPS), STEPWISE_LOG_LEVEL: 'error', STEPWISE_LOG_FORMAT: 'json' };
  delete env.ANTHROPIC_API_KEY; // the agent's offline (instant) model, whatever this shell holds
  const child = spawn(process.execPath, [join(ROOT, 'bin/stepwise.js'), 'worker', '--agent', AGENT, '--db', dbPath], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr!.resume();
  const ready = new Promise<void>((res, rej) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => { if (/^worker \S+ ready/.test(line)) res(); });
    child.once('exit', (code) => rej(new Error(`worker exited ${code} before it was ready`)));
  });
  return { child, ready };
}

async function sqliteCase(workers: number): Promise<Measured> {
  const { dir, cleanup } = tempDir();
  const dbPath = join(dir, 'throughput.db');
  const runtime = openLocalRuntime({ dbPath });
  const children: ChildProcess[] = [];
  try {
    const spawned = Array.from({ length: workers }, () => spawnWorker(dbPath));
    children.push(...spawned.map((s) => s.child));
    await Promise.all(spawned.map((s) => s.ready));
    const { agent, model } = benchAgent({ steps: STEPS });
    const deps = benchDeps(runtime, agent, model());
    const ids = Array.from({ length: RUNS }, (_, r) => `sqlite-${r}`);
    const open = runtime.db.prepare("SELECT count(*) AS n FROM runs WHERE status IN ('running', 'waiting')");
    const t0 = process.hrtime.bigint();
    for (const runId of ids) await startRun(deps, { goal: 'bench', runId });
    // A count on the runs table every 20 ms: a reader in WAL mode, it takes no write lock from the workers.
    while ((open.get() as { n: number }).n > 0) await new Promise((res) => setTimeout(res, 20));
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(children.map(exited));
    const problems = await missingSteps(runtime.store, ids, STEPS);
    const left = runtime.queue.depth();
    if (left) problems.push(`${left} messages left on the queue`);
    return { stepsPerSecond: (RUNS * STEPS) / seconds, problems, note: '' };
  } finally {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    runtime.close();
    cleanup();
  }
}

async function awsCase(workers: number): Promise<Measured> {
  const resources = await createTestResources('bench-throughput');
  const containers: WorkerProcess[] = [];
  try {
    const { agent, model } = benchAgent({ steps: STEPS });
    const runtime = resources.runtime();
    const ids: string[] = [];
    for (let r = 0; r < RUNS; r++) ids.push(await startTestRun(runtime, agent, `aws-${r}`));
    for (let w = 0; w < workers; w++) containers.push(new WorkerProcess({ resources, agent, model: model() }));
    const messages = RUNS * (STEPS + 1); // each step's message and the final DONE's
    let handled = 0;
    let failures = 0;
    let seconds = 0;
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    // Each container as Lambda's SQS poller drives it: receive one message, invoke, delete; all at once.
    await Promise.all(containers.map(async (container) => {
      while (handled < messages) {
        const poll = await pollOnce(resources.clients, resources.queueUrl, container, { max: 1, waitSeconds: 1 });
        failures += poll.failures.length;
        handled += poll.records.length - poll.failures.length;
        if (handled >= messages && !seconds) seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      }
    }));
    const cpu = process.cpuUsage(cpu0);
    // The containers share this process's one JavaScript thread: near 100% here, it is the ceiling.
    const busy = `this process's CPU ${fmt((100 * (cpu.user + cpu.system)) / 1e6 / seconds, 0)}% of one core`;
    const problems = await missingSteps(runtime.store, ids, STEPS);
    const left = await queueDepth(resources.clients, resources.queueUrl);
    if (left) problems.push(`${left} messages left on the queue`);
    return { stepsPerSecond: (RUNS * STEPS) / seconds, problems, note: [busy, ...(failures ? [`${failures} batch item failures (redelivered)`] : [])].join('; ') };
  } finally {
    for (const c of containers) c.close();
    resources.close();
  }
}

const cores = availableParallelism();
console.log(`steps per second, ${RUNS} runs x ${STEPS} steps, instant model, half the steps side-effecting (decision + ledger)`);
console.log(`machine: ${cores} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} at the start`);

const { dir, cleanup } = tempDir();
const floor = durableInsertFloor(join(dir, 'floor.db'));
floor.msPerInsert(100); // warm-up
const floorBefore = 1000 / floor.msPerInsert(500);

const rows: { name: string; workers: number; m: Measured }[] = [];
for (const workers of WORKERS) rows.push({ name: 'SQLite, worker processes', workers, m: await sqliteCase(workers) });
const floorAfter = 1000 / floor.msPerInsert(500);
floor.close();
cleanup();

const stopServers = await useAwsServers();
try {
  for (const workers of WORKERS) rows.push({ name: 'AWS, handler containers', workers, m: await awsCase(workers) });
} finally {
  await stopServers();
}

console.log(`\n  ${'runtime'.padEnd(26)} ${'workers'.padStart(7)} ${'steps/s'.padStart(8)} ${'x 1 worker'.padStart(10)}  check`);
for (const { name, workers, m } of rows) {
  const one = rows.find((r) => r.name === name && r.workers === 1)?.m.stepsPerSecond;
  const check = m.problems.length ? `FAILED: ${m.problems.slice(0, 3).join('; ')}${m.problems.length > 3 ? ` (+${m.problems.length - 3})` : ''}` : `${RUNS} runs completed, ${RUNS * STEPS} steps, none lost`;
  console.log(`  ${name.padEnd(26)} ${String(workers).padStart(7)} ${fmt(m.stepsPerSecond).padStart(8)} ${(one ? fmt(m.stepsPerSecond / one, 2) : 'n/a').padStart(10)}  ${check}${m.note ? `; ${m.note}` : ''}`);
}
console.log(`\n  floor: one durable SQLite insert per transaction on this disk: ${fmt(floorBefore)} inserts/s before, ${fmt(floorAfter)} after`);
console.log(`  (a step through a worker is several write transactions on the one file, serialised: the queue's take and`);
console.log(`   ack, the checkpoint's commit, a side effect's ledger claim and completion; with more processes than`);
console.log(`   ${cores} cores they also contend for CPU. The AWS containers share one Node process: see its CPU above)`);
console.log(`  load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} at the end`);
if (rows.some((r) => r.m.problems.length)) process.exitCode = 1;
