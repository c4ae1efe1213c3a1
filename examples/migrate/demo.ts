/**
 * `npm run demo`: the main job on the embedded default. A real multi-step agent migrates rows between two
 * tables of a local SQLite database in batches. Midway, the demo SIGKILLs its worker process after a batch
 * was copied but before that step's checkpoint; a fresh worker process resumes from the last checkpoint,
 * redoes the step under the same idempotency key (copying nothing twice), and goes on. Before its risky
 * step (dropping the source table) the run asks for approval and waits, with no process running; the
 * approval (the emailed link in a browser, or `--approve` / a non-interactive terminal: from the CLI) lets
 * a third worker process finish it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { createServer } from 'node:net';
import { constants as osConstants } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { readOutbox } from '../../lib/waits/outbox-notifier.ts';
import migrateAgent from './agent.ts';
import { checkMigration, openMigrationDb, seedSource } from './migration-db.ts';
import { BATCH_SIZE } from './scripted-model.ts';

const USAGE = `usage: npm run demo [-- --approve]

Migrates DEMO_ROWS rows (default 1000, at most ${maxRows()}) in batches with the offline model (or Claude, with
ANTHROPIC_API_KEY set), kills its worker mid-step, resumes on a fresh one, and waits for approval
before the risky step. Its files go to .stepwise/demo-<time>/. stepwise serve answers the approval link
on DEMO_PORT (default: a free port).

  --approve    approve from the terminal at once, not after you open the emailed link
               (what a terminal that is not interactive does anyway)
  -h, --help   this text
`;
let flags: { approve?: boolean; help?: boolean };
try {
  flags = parseArgs({ options: { approve: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } }).values;
} catch (error) {
  process.stderr.write(`demo: ${(error as Error).message}\n\n${USAGE}`);
  process.exit(2);
}
if (flags.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

/**
 * The run takes one step per batch and four more (inspect_tables, verify, drop_source's approval, drop_source):
 * more batches than the agent's step cap leaves room for would end the run capped, not at its approval.
 */
function maxRows(): number {
  return BATCH_SIZE * ((migrateAgent.settings?.stepCap ?? 60) - 4);
}

// Checked before anything starts: zero rows (or a typo, which Number() reads as NaN) leave no batch to
// crash in, and a bad value used to show only as a timeout a minute later.
const rowsText = process.env.DEMO_ROWS?.trim() || '1000';
const ROWS = /^\d+$/.test(rowsText) ? Number(rowsText) : NaN;
if (!(ROWS >= 1 && ROWS <= maxRows())) {
  process.stderr.write(`demo: DEMO_ROWS must be a whole number from 1 to ${maxRows()}, got "${rowsText}"\n`);
  process.exit(2);
}

// A port that cannot be listened on was found only after the whole migration, when stepwise serve started.
const portText = process.env.DEMO_PORT?.trim() || undefined;
const DEMO_PORT = portText === undefined ? undefined : /^\d+$/.test(portText) ? Number(portText) : NaN;
if (DEMO_PORT !== undefined && !(DEMO_PORT >= 1 && DEMO_PORT <= 65535)) {
  process.stderr.write(`demo: DEMO_PORT must be a whole number from 1 to 65535, got "${portText}"\n`);
  process.exit(2);
}
if (DEMO_PORT !== undefined && !(await portFree(DEMO_PORT))) {
  process.stderr.write(`demo: DEMO_PORT ${DEMO_PORT} is in use: pick another, or leave DEMO_PORT unset for a free one\n`);
  process.exit(2);
}

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'examples/migrate/agent.ts');
// Step 1 inspects the tables and steps 2 to batches + 1 copy them: the kill lands in the middle copy_batch
// for any row count (step 6 of 10 batches for the default 1000 rows). The offline model copies BATCH_SIZE
// rows a step; Claude may batch otherwise, which the wait for worker A reports instead of timing out.
const KILL_AT_STEP = 1 + Math.ceil(Math.ceil(ROWS / BATCH_SIZE) / 2);
const VISIBILITY_MS = 2000;

const dir = resolve(ROOT, '.stepwise', `demo-${Date.now()}`);
mkdirSync(dir, { recursive: true });
const stepwiseDb = join(dir, 'stepwise.db');
const migrateDb = join(dir, 'migrate.db');
const runId = `migrate-${Date.now()}`;
const say = (line: string) => process.stdout.write(`${line}\n`);
const autoApprove = flags.approve === true || !process.stdin.isTTY;
let publicUrl = '';

/** The children still running: stopped when the demo fails or is stopped, so none outlives it. */
const children = new Set<ChildProcess>();
let stopping = false;

function stepwise(args: string[], env: Record<string, string> = {}): ChildProcess {
  // main() goes on between awaits while the demo stops: it must not start a child nobody would stop.
  if (stopping) throw new Error('the demo is stopping');
  const child = spawn(process.execPath, [BIN, ...args, '--db', stepwiseDb], {
    cwd: ROOT, env: { ...process.env, MIGRATE_DB: migrateDb, STEPWISE_LOG_LEVEL: 'warn', STEPWISE_PUBLIC_URL: publicUrl, ...env }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/**
 * Stops the demo: SIGKILLs its children and waits until each has exited (and is reaped), then exits.
 * SIGKILL, not SIGTERM: a worker stopped gently first finishes its step, and worker A may be holding in one
 * for a minute; a stopped demo's run, in its own directory, is scratch. The first reason to stop wins.
 */
async function stop(code: number, why: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  process.stderr.write(why);
  await Promise.all([...children].map((child) => {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    return exited;
  }));
  process.exit(code);
}

/** Whether stepwise serve could listen on this port now. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer().once('error', () => resolve(false)).listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject).listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 8787));
    });
  });
}

async function finish(child: ChildProcess): Promise<{ code: number | null; out: string }> {
  let out = '';
  child.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
  child.stderr!.on('data', (d: Buffer) => { out += d.toString(); });
  const code = await new Promise<number | null>((r) => child.on('exit', r));
  return { code, out };
}

/** Starts a worker, echoing its progress lines under a label. */
function worker(label: string, env: Record<string, string> = {}): ChildProcess {
  const child = stepwise(['worker', '--agent', AGENT, '--visibility-ms', String(VISIBILITY_MS)], env);
  createInterface({ input: child.stdout! }).on('line', (l) => say(`  [${label} pid ${child.pid}] ${l}`));
  return child;
}

/** Resolves with the first stdout line of a child matching the pattern; rejects with what it said if it exits first. */
function lineOf(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let said = '';
    child.stderr!.on('data', (d: Buffer) => { said += d.toString(); });
    createInterface({ input: child.stdout! }).on('line', (l) => { if (pattern.test(l)) resolve(l); });
    child.once('close', (code) => reject(new Error(`stepwise exited (${code}) before printing ${pattern}${said.trim() ? `: ${said.trim()}` : ''}`)));
  });
}

async function waitFor(predicate: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main(): Promise<void> {
  const online = Boolean(process.env.ANTHROPIC_API_KEY);
  say(`stepwise demo: migrate ${ROWS} rows in batches, crash a worker midway, resume on a fresh one`);
  say(`model: ${online ? 'Claude (ANTHROPIC_API_KEY is set)' : 'offline scripted model (no ANTHROPIC_API_KEY): it reads the same Step prompt Claude would'}`);
  say(`files: ${dir}`);
  seedSource(migrateDb, ROWS);
  const port = DEMO_PORT ?? (await freePort());
  publicUrl = `http://127.0.0.1:${port}`;

  const started = await finish(stepwise(['start', '--agent', AGENT, '--run-id', runId, '--goal', `Copy every row of table source into table target, in batches, then verify that each row was copied exactly once.`]));
  if (started.code !== 0) throw new Error(`start failed: ${started.out}`);
  say(`\n1. ${started.out.trim().split('\n')[0]}`);

  const a = worker('worker A', { DEMO_HOLD_AFTER_STEP: String(KILL_AT_STEP) });
  say(`\n2. worker A (pid ${a.pid}) works the run; it will be killed with SIGKILL inside step ${KILL_AT_STEP}, after its batch is copied, before its checkpoint`);
  let holding = false;
  createInterface({ input: a.stderr! }).on('line', (l) => { if (l.startsWith('demo-hold:')) holding = true; });
  await waitFor(() => {
    if (holding) return true;
    // Said at once: worker A will not hold now, and waiting out the timeout would only hide why.
    if (a.exitCode !== null || a.signalCode !== null) throw new Error(`worker A exited (${a.exitCode ?? a.signalCode}) before it reached step ${KILL_AT_STEP}`);
    const status = statusOf();
    if (status !== 'running') throw new Error(`the run is ${status}, but worker A never held in step ${KILL_AT_STEP}, where the demo expects its middle copy_batch of ${BATCH_SIZE} rows (what the run did: stepwise status ${runId} --db ${stepwiseDb})`);
    return false;
  }, `worker A to reach step ${KILL_AT_STEP}`);
  a.kill('SIGKILL');
  await new Promise((r) => a.on('exit', r));
  say(`  worker A (pid ${a.pid}) killed with SIGKILL in the middle of step ${KILL_AT_STEP}`);

  say(`\n3. worker B, a fresh process, resumes after the ${VISIBILITY_MS} ms visibility timeout`);
  const b = worker('worker B');
  await waitFor(() => statusOf() !== 'running', 'the run to reach its approval', 120_000);
  b.kill('SIGTERM');
  await new Promise((r) => b.on('exit', r));

  say(`\n4. the run waits for approval before dropping the source table: its checkpoint says "waiting", worker B has stopped, nothing runs`);
  const server = stepwise(['serve', '--agent', AGENT, '--port', String(port)]);
  await lineOf(server, /^serving /);
  say(`  stepwise serve (pid ${server.pid}) serves the approval page at ${publicUrl}`);
  const link = readOutbox(join(dir, 'outbox'))[0]?.link;
  say(`  the approval email is in ${join(dir, 'outbox')}; its link: ${link}`);
  if (autoApprove) {
    say(`  approving from the terminal (stepwise approve ${runId})`);
    const approved = await finish(stepwise(['approve', runId, '--comment', 'approved from the demo']));
    say(`  ${approved.out.trim()}`);
  } else {
    say('  open the link in a browser and press Approve or Reject; or press Enter here to approve from the terminal');
    process.stdin.once('data', () => { void finish(stepwise(['approve', runId, '--comment', 'approved from the demo terminal'])); });
    await waitFor(() => statusOf() !== 'waiting', 'the approval', 24 * 3600 * 1000);
    process.stdin.pause();
  }

  say('\n5. worker C, another fresh process, takes the answer and finishes the run');
  const c = worker('worker C');
  await waitFor(() => statusOf() !== 'running', 'the run to finish', 120_000);
  c.kill('SIGTERM');
  server.kill('SIGTERM');
  await Promise.all([new Promise((r) => c.on('exit', r)), new Promise((r) => server.on('exit', r))]);

  say('\n6. the checkpoint history');
  say((await finish(stepwise(['history', runId]))).out.trimEnd());
  say('\n7. the run');
  say((await finish(stepwise(['status', runId]))).out.trimEnd());

  const db = openMigrationDb(migrateDb);
  const check = checkMigration(db);
  // The ledger holds one row per idempotency key applied: the batches, and the drop of the source table.
  const applied = db.prepare("SELECT count(*) AS n, count(json_extract(result, '$.dropped')) AS dropped FROM applied_keys").get() as { n: number; dropped: number };
  db.close();
  const run = JSON.parse((await finish(stepwise(['status', runId, '--json']))).out) as { steps: { step: number; idempotencyKey?: string; workerId: string; result: { text: string } }[] };
  const redone = run.steps.find((s) => s.step === KILL_AT_STEP);
  say(`\n8. step ${KILL_AT_STEP}, redone by worker B under the same idempotency key ${redone?.idempotencyKey}:`);
  say(`  ${redone?.result.text}`);

  say('\n9. check');
  say(`  source rows ${check.sourceRows}, target rows ${check.targetRows}, distinct ${check.distinctCopied}, duplicates ${check.duplicates}, missing ${check.missing}, mismatched ${check.mismatched}`);
  say(`  effects applied ${applied.n}, once each: ${applied.n - applied.dropped} batches copied, ${applied.dropped} table dropped`);
  say(check.exactlyOnce ? '  every row was copied exactly once: yes' : '  every row was copied exactly once: NO');
  if (!check.exactlyOnce || statusOf() !== 'completed') process.exitCode = 1;
}

/** The run's status, read through the store (a second connection is fine in WAL mode). */
function statusOf(): string {
  const runtime = openLocalRuntime({ dbPath: stepwiseDb });
  try {
    return (runtime.db.prepare('SELECT status FROM runs WHERE run_id = ?').get(runId) as { status: string } | undefined)?.status ?? 'unknown';
  } finally {
    runtime.close();
  }
}

// A failure, or a supervisor's (or `timeout`'s) signal to this process alone, stops the children too: left
// running, they kept a failed demo waiting on their pipes, and outlived a killed one.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => void stop(128 + osConstants.signals[signal], `demo stopped (${signal}); stopping its workers and server\n`));
}
// The last resort, for an exit that did not come through stop() (an error thrown in an event handler).
process.on('exit', () => { for (const child of children) child.kill('SIGKILL'); });
main().catch((error: unknown) => stop(1, `demo failed: ${(error as Error).stack ?? String(error)}\n`));
