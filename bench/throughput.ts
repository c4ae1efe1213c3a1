/**
 * Steps per second with many runs and 1, 4 and 16 workers, on both runtimes, same agent (aws-support.ts:
 * half the steps side-effecting through ctx.once), instant model:
 *   - SQLite: real worker processes (`stepwise worker`, each its own Node process) on one database file;
 *     the runs are enqueued once every worker has said it is ready, and timed until the last one ends.
 *   - AWS: 1, 4 or 16 WorkerProcess containers (their own SDK clients and handler, one message per
 *     invocation as the stack's batch size of 1) polling one FIFO queue concurrently, on DynamoDB Local +
 *     fauxqs. The containers share this Node process, the servers share the machine.
 *   - SQLite again with a model that takes 50 ms to decide (model-ms), one round: steps that wait on their
 *     model, as every real one does, where the instant model's steps wait on the file's write lock.
 *   - SQLite with one worker process running 1, 4 or 16 steps at once (`stepwise worker --concurrency n`),
 *     with each model: where n processes are n connections contending for the lock, this is one.
 * The worker processes' write transactions are timed (bench/write-lock.mjs): their share of the write lock.
 * Baselines in the same run: each runtime's 1-worker figure (the scaling factor), and the durable-insert
 * floor of this disk, measured just before each SQLite case (a shared disk's fsync time drifts tenfold
 * within minutes). Rounds alternate the order of the cases (1, 4, 16, then 16, 4, 1) so that drift hits
 * them alike; the median is printed, with the range. Where the CPU went is printed next to each figure
 * (from /proc: the worker processes; this process, which holds the containers and fauxqs; DynamoDB
 * Local's JVM). Every run is checked to have completed with every step once. Printed, never asserted.
 *
 *   node --import tsx bench/throughput.ts [runs] [steps-per-run] [workers,...] [sqlite-rounds] [aws-rounds] [model-ms] [model-ms-rounds]
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/throughput.ts ...   (the compiled code, workers too, as npm run bench runs it)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startRun } from '../lib/engine/start.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { createTestResources, queueDepth, startTestRun } from '../test/aws/aws-fixtures.ts';
import { WorkerProcess, pollOnce } from '../test/aws/lambda-harness.ts';
import { useAwsServers } from '../test/support/aws-servers.ts';
import { benchCounts } from './args-support.ts';
import { benchAgent } from './aws-support.ts';
import { benchDeps, codeMeasured, compiledCode, durableInsertFloor, fmt, median, missingSteps, tempDir } from './support.ts';

/**
 * The last two: the SQLite cases again with a model that takes this long to decide (a remote model's reply,
 * shortened), in this many rounds: where a step waits on its model, not on the file's write lock.
 */
const [RUNS, STEPS, WORKERS, SQLITE_ROUNDS, AWS_ROUNDS, MODEL_MS, SLOW_MODEL_ROUNDS] = benchCounts([
  { name: 'runs', fallback: 32 }, { name: 'steps-per-run', fallback: 20 }, { name: 'workers', fallback: [1, 4, 16] },
  { name: 'sqlite-rounds', fallback: 3, least: 0 }, { name: 'aws-rounds', fallback: 2, least: 0 },
  { name: 'model-ms', fallback: 50, least: 0 }, { name: 'model-ms-rounds', fallback: 1, least: 0 },
]) as [number, number, number[], number, number, number, number];
const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const AGENT = join(ROOT, 'bench/throughput-support.ts');
/**
 * The worker processes run the code this bench measures: the compiled CLI when this process runs dist/
 * (bench/compiled.mjs, as npm run bench does), the checkout's bin/stepwise.js (the sources) otherwise.
 */
const WORKER_ENTRY = compiledCode()
  ? ['--import', 'tsx', '--import', join(ROOT, 'bench/compiled.mjs'), join(ROOT, 'bench/compiled-cli.mjs')]
  : [join(ROOT, 'bin/stepwise.js')];

interface Measured { stepsPerSecond: number; problems: string[]; cpu: string; failures: number; lock?: WriteLock }

/**
 * The worker processes' write transactions in one case (bench/write-lock.mjs): how many, and their summed
 * waits for the file's write lock and holds of it (from BEGIN IMMEDIATE taking it to COMMIT's return, the
 * fsync included). Autocommit writes outside a transaction are not among them, and are few: a busy worker's
 * queue work rides in its checkpoints' transactions, so they are its first receive, the ledger's lease
 * renewals of a long effect, and a stopping worker's hand-back. A worker's transactions at its start (the
 * prune) are among them, a few against thousands.
 */
interface WriteLock { transactions: number; waitUs: number; holdUs: number; waitsOver1ms: number; longestWaitUs: number; seconds: number }

function writeLockOf(file: string, seconds: number): WriteLock | undefined {
  if (!existsSync(file)) return undefined;
  const lock: WriteLock = { transactions: 0, waitUs: 0, holdUs: 0, waitsOver1ms: 0, longestWaitUs: 0, seconds };
  for (const line of readFileSync(file, 'utf8').split('\n').filter(Boolean)) {
    const p = JSON.parse(line) as Omit<WriteLock, 'seconds'>;
    lock.transactions += p.transactions;
    lock.waitUs += p.waitUs;
    lock.holdUs += p.holdUs;
    lock.waitsOver1ms += p.waitsOver1ms;
    lock.longestWaitUs = Math.max(lock.longestWaitUs, p.longestWaitUs);
  }
  return lock;
}

/** CPU seconds used so far by a process and everything under it (Linux /proc; nothing elsewhere). */
function cpuSeconds(pid: number, self = true): number {
  let total = 0;
  try {
    if (self) {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (100 Hz)
    }
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      for (const child of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ').filter(Boolean)) total += cpuSeconds(Number(child));
    }
  } catch {
    // gone, or no /proc: counted as nothing
  }
  return total;
}

const share = (cpu: number, seconds: number) => `${fmt((100 * cpu) / seconds, 0)}%`;

const exited = (c: ChildProcess) => new Promise<void>((res) => (c.exitCode !== null || c.signalCode !== null ? res() : c.once('exit', () => res())));

/** One `stepwise worker` process, its write transactions timed into `lockFile`; resolves once it printed its ready line. */
function spawnWorker(dbPath: string, lockFile: string, modelMs: number, concurrency: number): { child: ChildProcess; ready: Promise<void> } {
  const env: NodeJS.ProcessEnv = {
    ...process.env, THROUGHPUT_STEPS: String(STEPS), THROUGHPUT_MODEL_MS: String(modelMs), STEPWISE_LOG_LEVEL: 'error', STEPWISE_LOG_FORMAT: 'json', BENCH_WRITE_LOCK: lockFile,
  };
  delete env.ANTHROPIC_API_KEY; // the agent's offline (instant) model, whatever this shell holds
  const child = spawn(process.execPath, ['--import', join(ROOT, 'bench/write-lock.mjs'), ...WORKER_ENTRY, 'worker', '--agent', AGENT, '--db', dbPath, '--concurrency', String(concurrency)], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr!.resume();
  const ready = new Promise<void>((res, rej) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => { if (/^worker \S+ ready/.test(line)) res(); });
    child.once('exit', (code) => rej(new Error(`worker exited ${code} before it was ready`)));
  });
  return { child, ready };
}

/** `workers` worker processes, each running `concurrency` steps at once (`stepwise worker --concurrency`). */
async function sqliteCase(workers: number, modelMs = 0, concurrency = 1): Promise<Measured> {
  const { dir, cleanup } = tempDir();
  const dbPath = join(dir, 'throughput.db');
  const runtime = openLocalRuntime({ dbPath });
  const children: ChildProcess[] = [];
  try {
    const lockFile = join(dir, 'write-lock.jsonl');
    const spawned = Array.from({ length: workers }, () => spawnWorker(dbPath, lockFile, modelMs, concurrency));
    children.push(...spawned.map((s) => s.child));
    await Promise.all(spawned.map((s) => s.ready));
    const { agent, model } = benchAgent({ steps: STEPS });
    const deps = benchDeps(runtime, agent, model());
    const ids = Array.from({ length: RUNS }, (_, r) => `sqlite-${r}`);
    const open = runtime.db.prepare("SELECT count(*) AS n FROM runs WHERE status IN ('running', 'waiting')");
    const cpu0 = cpuSeconds(process.pid, false);
    const t0 = process.hrtime.bigint();
    for (const runId of ids) await startRun(deps, { goal: 'bench', runId });
    // A count on the runs table every 20 ms: a reader in WAL mode, it takes no write lock from the workers.
    while ((open.get() as { n: number }).n > 0) await new Promise((res) => setTimeout(res, 20));
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = `workers ${share(cpuSeconds(process.pid, false) - cpu0, seconds)}`;
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(children.map(exited));
    const problems = await missingSteps(runtime.store, ids, STEPS);
    const left = runtime.queue.depth();
    if (left) problems.push(`${left} messages left on the queue`);
    const lock = writeLockOf(lockFile, seconds);
    if (!lock) problems.push('the worker processes wrote no write-lock figures');
    return { stepsPerSecond: (RUNS * STEPS) / seconds, problems, cpu, failures: 0, ...(lock ? { lock } : {}) };
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
    const self0 = process.cpuUsage();
    const dynamo0 = cpuSeconds(process.pid, false);
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
    const self = process.cpuUsage(self0);
    // The containers and fauxqs share this process's one JavaScript thread: near 100%, that is the ceiling.
    const cpu = `containers + fauxqs ${share((self.user + self.system) / 1e6, seconds)}, DynamoDB Local ${share(cpuSeconds(process.pid, false) - dynamo0, seconds)}`;
    const problems = await missingSteps(runtime.store, ids, STEPS);
    const left = await queueDepth(resources.clients, resources.queueUrl);
    if (left) problems.push(`${left} messages left on the queue`);
    return { stepsPerSecond: (RUNS * STEPS) / seconds, problems, cpu, failures };
  } finally {
    for (const c of containers) c.close();
    resources.close();
  }
}

const cores = availableParallelism();
console.log(`steps per second, ${RUNS} runs x ${STEPS} steps, instant model${MODEL_MS > 0 && SLOW_MODEL_ROUNDS > 0 ? ` (and one taking ${MODEL_MS} ms, in the second SQLite table)` : ''}, half the steps side-effecting (decision + ledger); ${codeMeasured()}, the worker processes too`);
console.log(`machine: ${cores} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} at the start`);

/** Rounds of every worker count, in alternating order; each measurement with the floor taken just before it. */
async function rounds(count: number, measure: (workers: number) => Promise<Measured>, floor?: () => number) {
  const results = new Map<number, { m: Measured; floor?: number }[]>(WORKERS.map((w) => [w, []]));
  for (let round = 0; round < count; round++) {
    for (const workers of round % 2 ? [...WORKERS].reverse() : WORKERS) {
      const before = floor?.();
      results.get(workers)!.push({ m: await measure(workers), ...(before !== undefined ? { floor: before } : {}) });
    }
  }
  return results;
}

const { dir, cleanup } = tempDir();
const insertFloor = durableInsertFloor(join(dir, 'floor.db'));
insertFloor.msPerInsert(100); // warm-up
const sqlite = await rounds(SQLITE_ROUNDS, sqliteCase, () => 1000 / insertFloor.msPerInsert(300));
const slowModel = await rounds(MODEL_MS > 0 ? SLOW_MODEL_ROUNDS : 0, (workers) => sqliteCase(workers, MODEL_MS), () => 1000 / insertFloor.msPerInsert(300));
// One worker process running 1, 4 or 16 steps at once (--concurrency), the same counts as the processes above.
const oneProcess = await rounds(SQLITE_ROUNDS, (steps) => sqliteCase(1, 0, steps), () => 1000 / insertFloor.msPerInsert(300));
const oneProcessSlowModel = await rounds(MODEL_MS > 0 ? SLOW_MODEL_ROUNDS : 0, (steps) => sqliteCase(1, MODEL_MS, steps), () => 1000 / insertFloor.msPerInsert(300));
insertFloor.close();
cleanup();

const stopServers = await useAwsServers();
let aws: Awaited<ReturnType<typeof rounds>>;
try {
  aws = await rounds(AWS_ROUNDS, awsCase);
} finally {
  await stopServers();
}

/** The worker processes' write transactions by worker count, summed over the rounds (WriteLock). */
function printWriteLock(results: Map<number, { m: Measured }[]>, column: string): void {
  console.log('  the write lock, the worker processes\' write transactions (bench/write-lock.mjs), summed over the rounds:');
  console.log(`  ${column.padStart(7)} ${'per step'.padStart(8)} ${'held'.padStart(9)} ${'waited'.padStart(9)} ${'waits > 1 ms'.padStart(12)} ${'longest wait'.padStart(12)}  held, share of the case's time`);
  for (const [workers, rs] of results) {
    const locks = rs.flatMap((r) => (r.m.lock ? [r.m.lock] : []));
    if (!locks.length) continue;
    const sum = (f: (l: WriteLock) => number) => locks.reduce((n, l) => n + f(l), 0);
    const n = sum((l) => l.transactions);
    console.log(`  ${String(workers).padStart(7)} ${fmt(n / (RUNS * STEPS * locks.length), 2).padStart(8)} ${`${fmt(sum((l) => l.holdUs) / n, 0)} us`.padStart(9)} ${`${fmt(sum((l) => l.waitUs) / n, 0)} us`.padStart(9)} ${`${fmt((100 * sum((l) => l.waitsOver1ms)) / n)}%`.padStart(12)} ${`${fmt(Math.max(...locks.map((l) => l.longestWaitUs)) / 1000)} ms`.padStart(12)}  ${fmt((100 * sum((l) => l.holdUs)) / (sum((l) => l.seconds) * 1e6), 0)}%`);
  }
}

const range = (xs: number[]) => `${fmt(Math.min(...xs))}..${fmt(Math.max(...xs))}`;
let failed = false;
/** A table's title, its figures, its rounds, and what its first column counts. */
const sections: [string, Awaited<ReturnType<typeof rounds>>, number, string][] = [['SQLite, worker processes', sqlite, SQLITE_ROUNDS, 'workers']];
if (MODEL_MS > 0 && SLOW_MODEL_ROUNDS > 0) sections.push([`SQLite, worker processes, the model taking ${MODEL_MS} ms a step`, slowModel, SLOW_MODEL_ROUNDS, 'workers']);
sections.push(['SQLite, one worker process running n steps at once (--concurrency n)', oneProcess, SQLITE_ROUNDS, 'n']);
if (MODEL_MS > 0 && SLOW_MODEL_ROUNDS > 0) sections.push([`SQLite, one worker process running n steps at once, the model taking ${MODEL_MS} ms a step`, oneProcessSlowModel, SLOW_MODEL_ROUNDS, 'n']);
sections.push(['AWS, handler containers', aws, AWS_ROUNDS, 'workers']);
for (const [name, results, count, column] of sections) {
  if (!count) continue;
  const one = median(results.get(1)?.map((r) => r.m.stepsPerSecond) ?? [NaN]);
  console.log(`\n${name}, median of ${count} round${count === 1 ? '' : 's'}:`);
  console.log(`  ${column.padStart(7)} ${'steps/s'.padStart(8)} ${'range'.padStart(14)} ${`x ${column === 'n' ? 'n = 1' : '1 worker'}`.padStart(10)} ${name.startsWith('SQLite') ? `${'floor/s'.padStart(8)} ` : ''} CPU during the case (% of one core; ${cores} cores), per round`);
  for (const [workers, rs] of results) {
    const rates = rs.map((r) => r.m.stepsPerSecond);
    const floors = rs.flatMap((r) => (r.floor !== undefined ? [r.floor] : []));
    console.log(`  ${String(workers).padStart(7)} ${fmt(median(rates)).padStart(8)} ${range(rates).padStart(14)} ${fmt(median(rates) / one, 2).padStart(10)} ${floors.length ? `${fmt(median(floors), 0).padStart(8)} ` : ''} ${rs.map((r) => r.m.cpu).join(' | ')}`);
  }
  if (name.startsWith('SQLite')) printWriteLock(results, column);
  const problems = [...results.values()].flat().flatMap((r) => r.m.problems);
  const failures = [...results.values()].flat().reduce((n, r) => n + r.m.failures, 0);
  failed ||= problems.length > 0;
  console.log(problems.length
    ? `  check FAILED: ${problems.slice(0, 5).join('; ')}${problems.length > 5 ? ` (+${problems.length - 5})` : ''}`
    : `  check: every round, all ${RUNS} runs completed with their ${STEPS} steps, each once, no version missing, queue empty${failures ? `; ${failures} batch item failures, redelivered` : ''}`);
}
console.log(`\nfloor/s: one durable SQLite insert per transaction (WAL, synchronous=FULL) on this disk, just before the case.`);
console.log(`All workers write one file, one transaction at a time, each holding its write lock through its fsync: a`);
console.log(`read-only step is one transaction (its checkpoint, with the queue's send, ack and next receive in it), a`);
console.log(`side-effecting step four (its decision, the ledger's claim and completion, its checkpoint). One worker`);
console.log(`process already holds the lock most of the time (the write lock's last column), so more processes add no`);
console.log(`transactions a second; each of their holds is longer (another process's commit makes this connection read`);
console.log(`its pages again, and with more processes than ${cores} cores a holder can wait for CPU). A process that finds the`);
console.log(`lock taken sleeps in SQLite's busy handler (1, 2, 5, 10 ... 100 ms between tries) while the others take it`);
console.log(`in turn: the waits over 1 ms, and the longest. Where each step waits on its model instead (the second SQLite`);
console.log(`table; a remote model takes seconds), the lock is free most of the time and each worker process adds its own`);
console.log(`steps a second. One process running n steps at once (--concurrency n) has one connection: its steps`);
console.log(`take the lock in turn, with no busy handler's sleeps between them, and while one step awaits its model the`);
console.log(`others run: with a model that takes time, one process moves as many steps a second as n processes, on less`);
console.log(`CPU. The AWS containers share one Node process with fauxqs, and DynamoDB`);
console.log(`Local runs on the same ${cores} cores: on AWS each container has its own CPU, and the services scale apart.`);
console.log(`load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} at the end`);
if (failed) process.exitCode = 1;
