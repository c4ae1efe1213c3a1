/**
 * `npm run chaos`: seeded, reproducible fault schedules; after each, the invariants (bench/chaos/invariants.ts).
 *
 *   npm run chaos -- [--seed n] [--schedules n] [--aws n] [--processes n] [--aws-processes n] [--verbose]
 *
 * Without --seed a seed is drawn and printed; schedule i of a run uses scheduleSeed(seed, i), printed for
 * any schedule that breaks an invariant with the command that replays it (`--exact --seed s --schedules 1`,
 * or `--aws 1`, `--processes 1`, `--aws-processes 1`: with --exact only the kind named runs).
 * `--schedules n` (default 1000) engine schedules on SQLite with in-process workers; `--aws n` (default
 * 1000) schedules over the AWS runtime on DynamoDB Local and fauxqs (bench/chaos/aws-schedule.ts; the
 * servers start unless the environment points at running ones), seeds scheduleSeed(seed, 2_000_000 + i);
 * `--processes n` (default 20) schedules of real worker processes SIGKILLed and SIGSTOPped at random moments
 * on one SQLite file (bench/chaos/process-schedule.ts), `--aws-processes n` (default 10) the same with
 * `stepwise worker --backend aws` on DynamoDB Local and fauxqs (bench/chaos/options.ts).
 * Exits 1 if any invariant broke, 2 for arguments it cannot take.
 */
import { engineSchedule } from './engine-schedule.ts';
import { CHAOS_USAGE, chaosOptions, replayCommand } from './options.ts';
import { stopChaosModelServer } from './model-server.ts';
import { scheduleSeed } from './random.ts';
import { add, emptyTotals, formatTotals } from './totals.ts';

// The SDK's notice that its releases after early 2027 need Node 22 (we pin older ones) is noise here.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

let options;
try {
  options = chaosOptions(process.argv.slice(2));
} catch (error) {
  console.error(`npm run chaos: ${(error as Error).message}`);
  process.exit(2);
}
if (options === 'help') {
  process.stdout.write(CHAOS_USAGE);
  process.exit(0);
}
const { seed, exact, verbose, schedules, aws: awsSchedules } = options;
console.log(`chaos: seed ${seed}, ${schedules} engine schedules, ${awsSchedules} AWS schedules, ${options.processes} of SQLite worker processes, ${options.awsProcesses} of AWS worker processes${exact ? ' (exact seed)' : ''}; replay with --seed ${seed}`);

const totals = emptyTotals();
const t0 = Date.now();
for (let i = 0; i < schedules; i++) {
  const s = exact ? seed : scheduleSeed(seed, i);
  const report = await engineSchedule(s);
  add(totals, report);
  if (report.violations.length || report.unexpected.length || verbose) {
    console.log(`schedule ${i} (seed ${s}; replay: ${replayCommand('engine', s)}):`, JSON.stringify({ violations: report.violations, unexpected: report.unexpected, crashes: report.crashesByPoint }));
  }
  if ((i + 1) % 100 === 0) console.log(`  ${i + 1} schedules, ${totals.violations} violations, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}
if (schedules > 0) console.log(formatTotals(totals, `engine + SQLite runtime, in-process workers (${((Date.now() - t0) / 1000).toFixed(0)} s)`));

let awsBad = 0;
if (awsSchedules > 0) {
  const [{ awsSchedule }, { useAwsServers }] = await Promise.all([import('./aws-schedule.ts'), import('../../test/support/aws-servers.ts')]);
  const stopServers = await useAwsServers();
  const atotals = emptyTotals();
  const a0 = Date.now();
  try {
    for (let i = 0; i < awsSchedules; i++) {
      const s = exact ? seed : scheduleSeed(seed, 2_000_000 + i);
      const report = await awsSchedule(s);
      add(atotals, report);
      if (report.violations.length || report.unexpected.length || verbose) {
        console.log(`aws schedule ${i} (seed ${s}; replay: ${replayCommand('aws', s)}):`, JSON.stringify({ violations: report.violations, unexpected: report.unexpected, crashes: report.crashesByPoint }));
      }
      if ((i + 1) % 100 === 0) console.log(`  ${i + 1} AWS schedules, ${atotals.violations} violations, ${((Date.now() - a0) / 1000).toFixed(0)} s`);
    }
  } finally {
    await stopServers();
    await stopChaosModelServer();
  }
  awsBad = atotals.violations + atotals.unexpected;
  const seconds = (Date.now() - a0) / 1000;
  console.log(formatTotals(atotals, `AWS runtime: Lambda handler on DynamoDB Local + fauxqs (${seconds.toFixed(0)} s, ${(seconds / awsSchedules).toFixed(2)} s per schedule)`));
}

/** Schedules of real worker processes on one backend; the number of broken invariants and unexpected errors. */
async function processSchedules(backend: 'local' | 'aws', count: number, base: number): Promise<number> {
  const { processSchedule } = await import('./process-schedule.ts');
  const ptotals = emptyTotals();
  const p0 = Date.now();
  for (let i = 0; i < count; i++) {
    const report = await processSchedule(exact ? seed : scheduleSeed(seed, base + i), { backend });
    add(ptotals, report);
    if (report.violations.length || report.unexpected.length || verbose) {
      console.log(`${backend} process schedule ${i} (seed ${report.seed}; replay: ${replayCommand(backend === 'local' ? 'processes' : 'aws-processes', report.seed)}):`, JSON.stringify({ violations: report.violations, unexpected: report.unexpected }));
    }
    if ((i + 1) % 10 === 0) console.log(`  ${i + 1} ${backend} process schedules, ${ptotals.violations} violations, ${((Date.now() - p0) / 1000).toFixed(0)} s`);
  }
  const where = backend === 'local' ? 'one SQLite file' : 'DynamoDB Local + fauxqs (--backend aws)';
  console.log(formatTotals(ptotals, `real worker processes on ${where}, SIGKILLed and SIGSTOPped (${((Date.now() - p0) / 1000).toFixed(0)} s)`));
  // SQS keeps no receive count once a message is deleted: the figure above counts nothing there.
  if (backend === 'aws') console.log('  (duplicates delivered: not counted on SQS)');
  return ptotals.violations + ptotals.unexpected;
}

let processBad = 0;
if (options.processes > 0) processBad += await processSchedules('local', options.processes, 1_000_000);
if (options.awsProcesses > 0) {
  const { useAwsServers } = await import('../../test/support/aws-servers.ts');
  const stopServers = await useAwsServers();
  try {
    processBad += await processSchedules('aws', options.awsProcesses, 3_000_000);
  } finally {
    await stopServers();
  }
}
// The engine and AWS schedules' model server would keep the process alive (the AWS ones stopped it already).
await stopChaosModelServer();
// Exits now, not when the event loop drains: a simulated killed process's effect never returns (as a real
// one's never would), and its tool's time limit (lib/engine/tool-time.ts) is a timer that would keep this
// process up to 15 minutes past the totals. Should it fire in a long run, the dead process's store calls
// fail (faulty.ts), as nothing of a killed process reaches the store.
process.exit(totals.violations || totals.unexpected || awsBad || processBad ? 1 : 0);
