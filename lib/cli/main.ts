import { writeSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { NewerFormatError, StaleVersionError, StepwiseError, movedOnText } from '../core/errors.ts';
import { DECIMAL, DIGITS, dollarsAboveZero, wholeAboveZero } from '../core/limit-text.ts';
import type { Budget } from '../core/state.ts';
import { chooseLogFormat, chooseLogLevel, setLogFormat } from '../log-format.ts';
import { MAX_WORKER_CONCURRENCY } from '../settings.ts';
import { printable } from '../core/printable.ts';
import { isBusy, lockedDatabaseHint } from '../local/busy.ts';
import { damagedDatabaseHint, isDamaged } from '../local/damaged.ts';
import { isDiskFull } from '../local/disk-full.ts';
import { awsRefusal, refusalFix } from '../aws/refusal.ts';
import { exitBecause } from './exit-in-step.ts';

const USAGE = `stepwise: run long LLM agents one checkpointed step at a time

usage:
  stepwise run     --agent <path> --goal <text> [--run-id <id>] [--step-cap <n>]   start a run and work it here
                   (--run-id of an existing run, without --goal: work that run here)
                   [--visibility-ms <ms>]   how long a step is held before another worker may take it over
                   (default 30000; run and worker)
  stepwise start   --agent <path> --goal <text> [--run-id <id>] [--step-cap <n>]   enqueue a run for the workers
                   [--budget-tokens <n>] [--budget-usd <x>]   stop the run before it spends more (run and start)
  stepwise worker  --agent <path> [--visibility-ms <ms>] [--idle-exit-ms <ms>]     work queued runs until stopped
                   (or once it has had no step to work for --idle-exit-ms)
                   [--stall-ms <ms>]   re-drive runs stuck this long (default 60000; on AWS 900000,
                   where the worker also sends the timers of waits that come due)
                   [--concurrency <n>] steps at once in this process, each on its own run (default 1)
  stepwise status  [<runId>] [--status <status>] [--json] [--cursor <c>]           one run, or a table of runs (1,000 a page)
  stepwise history <runId> [--json]                                                the checkpoint timeline
                   status <runId>, history and show print a long run's last 50 steps (or checkpoints):
                   [--last <n>] the last n, [--all] every one (--json gives every one unless --last)
  stepwise watch   <runId>                                                         each checkpoint as the workers write
                   it, until the run ends (exit 0 completed, 3 ended otherwise)
  stepwise prune   [--older-than-days <n>]                                         drop checkpoint versions past the
                   retention window they were written with (14 days, or STEPWISE_RETENTION_DAYS then), the
                   latest of every run kept
  stepwise drift   --agent <new-agent> [--json]                                    before a deploy: which running or
                   waiting runs this code and agent cannot resume (exit 3 if any)
  stepwise show    <runId> [--step <n>] [--full] [--json]                          the state after a step, each step in full
  stepwise fork    <runId> --from-step <n> [--run-id <id>] [--goal <text>]         a new run from the state after step n
                   [--step-cap <n>] [--budget-tokens <n>] [--budget-usd <x>]
  stepwise retry   <runId> [--step-cap <n>] [--budget-tokens <n>] [--budget-usd <x>] continue a failed, capped or over-budget run
  stepwise cancel  <runId> [--reason <text>] [--as <who>]                          stop a run at its next step boundary
  stepwise delete  <runId> [--json]                                                a run that has ended, and all
                   kept for it (its idempotency records too; prune frees its blobs)
  stepwise serve   --agent <path> [--port <n>] [--host <addr>]                     the API and approval pages
                   [--max-connections <n>] connections held at once (default 1024), and
                   [--max-connections-per-address <n>] from one client address (default 128; behind a
                   proxy every client has its address); past either, a new connection is closed
  stepwise approve <runId> [--comment <text>] [--as <approver>]                    answer a waiting approval
  stepwise reject  <runId> [--comment <text>] [--as <approver>]
  stepwise emit    <type> <key> [<json>] [--id <event id>]                         send an event to waiting runs
  stepwise backup  <file>                                                          a snapshot of the SQLite file, taken while
                   its workers run, written to a new file (never over one)
  stepwise init    [--backend aws [--table <t>] [--bucket <b>] [--queue-name <q>]] [--json]
                   make the database file, or the AWS table, bucket and FIFO queue (without CDK)

common options:
  --db <file>          the SQLite file (default .stepwise/stepwise.db, or STEPWISE_DB)
  --agent <path>       a module exporting defineAgent({...}) (.ts or .js; or STEPWISE_AGENT)
  --backend aws        DynamoDB + S3 + SQS instead of SQLite (or STEPWISE_BACKEND=aws), with
  --stack <name>       the table, bucket and queue from a deployed stack's outputs (or STEPWISE_STACK), or
  --table, --bucket, --queue-url   (or TABLE_NAME, BUCKET_NAME, QUEUE_URL; endpoints from AWS_ENDPOINT_URL_*)
  --log json|pretty    logs on stderr: JSON lines at info, or warnings and errors as readable lines
                       (default: pretty when stderr is a terminal, else json; or STEPWISE_LOG_FORMAT)
  --help, -h           this text;   --version, -V   the package's version

exit codes: 0 done; 1 a failure of stepwise or its environment (the database, AWS, a crash); 2 bad input
(a usage error, an unknown run, a file that cannot hold a database, AWS credentials, permissions or KMS key
refused, an answer to a wait already answered or expired); run: 3 the run failed, was cancelled or stopped
at its step cap or budget; drift: 3 runs this code cannot resume
`;

const OPTIONS = {
  agent: { type: 'string' },
  goal: { type: 'string' },
  'run-id': { type: 'string' },
  'step-cap': { type: 'string' },
  db: { type: 'string' },
  backend: { type: 'string' },
  stack: { type: 'string' },
  'queue-name': { type: 'string' },
  table: { type: 'string' },
  bucket: { type: 'string' },
  'queue-url': { type: 'string' },
  json: { type: 'boolean' },
  status: { type: 'string' },
  'visibility-ms': { type: 'string' },
  'idle-exit-ms': { type: 'string' },
  log: { type: 'string' },
  port: { type: 'string' },
  host: { type: 'string' },
  'max-connections': { type: 'string' },
  'max-connections-per-address': { type: 'string' },
  comment: { type: 'string' },
  as: { type: 'string' },
  id: { type: 'string' },
  'stall-ms': { type: 'string' },
  concurrency: { type: 'string' },
  'older-than-days': { type: 'string' },
  step: { type: 'string' },
  'from-step': { type: 'string' },
  full: { type: 'boolean' },
  reason: { type: 'string' },
  'budget-tokens': { type: 'string' },
  'budget-usd': { type: 'string' },
  cursor: { type: 'string' },
  last: { type: 'string' },
  all: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'V' },
} as const;

function wholeNumber(name: string, value: string | undefined, least = 0): number | undefined {
  if (value === undefined) return undefined;
  const n = DIGITS.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < least) throw new StepwiseUsageError(`--${name} must be a whole number (${least} or more), got ${JSON.stringify(value)}`);
  return n;
}

/** For a count or a duration where 0 means nothing (a cap of no steps, a lease that has already run out). */
function atLeastOne(name: string, value: string | undefined): number | undefined {
  return wholeNumber(name, value, 1);
}

/**
 * `--step -1` as `--step=-1`: parseArgs reads a value starting with a dash as a missing value and says so in
 * a paragraph about its own syntax, where the option's check has a plainer message for a negative number.
 */
function joinNegativeValues(argv: string[]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < argv.length; i += 1) {
    const name = argv[i]!.startsWith('--') ? argv[i]!.slice(2) : undefined;
    const option = name !== undefined ? (OPTIONS as Record<string, { type: string }>)[name] : undefined;
    const next = argv[i + 1];
    if (option?.type === 'string' && next !== undefined && /^-[\d.]/.test(next)) {
      joined.push(`${argv[i]}=${next}`);
      i += 1;
    } else {
      joined.push(argv[i]!);
    }
  }
  return joined;
}

function budgetOf(tokens: string | undefined, usd: string | undefined): { budget?: Budget } {
  if (tokens === undefined && usd === undefined) return {};
  const budget: Budget = {};
  if (tokens !== undefined) {
    const n = wholeAboveZero(tokens);
    if (n === undefined) throw new StepwiseUsageError(`--budget-tokens must be a whole number above 0, got ${JSON.stringify(tokens)}`);
    budget.tokens = n;
  }
  if (usd !== undefined) {
    const n = dollarsAboveZero(usd);
    if (n === undefined) throw new StepwiseUsageError(`--budget-usd must be a number above 0 (dollars, in plain decimals: 0.000001, not 1e-6), got ${JSON.stringify(usd)}`);
    budget.usd = n;
  }
  return { budget };
}

class StepwiseUsageError extends StepwiseError {}

/**
 * Options that name something: given empty (an unset shell variable, `--run-id "$ID"`), each would quietly
 * mean its default instead (a random run or event id, the default database or agent), so repeating the
 * command would not do the same thing. Refused instead.
 */
const NAMING_OPTIONS = ['run-id', 'id', 'db', 'agent', 'backend', 'stack', 'table', 'bucket', 'queue-url', 'queue-name'] as const;

/** The options every command reads: where the store is, and how to log. */
const STORE_OPTIONS = ['db', 'backend', 'stack', 'table', 'bucket', 'queue-url', 'log', 'help', 'version'] as const;
const START_OPTIONS = ['agent', 'goal', 'run-id', 'step-cap', 'budget-tokens', 'budget-usd'] as const;
/**
 * The positional arguments each command takes after its name, and the options it reads besides the store's:
 * one more argument, or an option it would not read, is refused, not ignored (`worker --budget-usd 1` ran
 * every run without a budget, `cancel r --comment why` cancelled it without the reason).
 */
const ARGUMENTS: Record<string, { most: number; usage: string; options: readonly (keyof typeof OPTIONS)[] }> = {
  run: { most: 0, usage: 'stepwise run --agent <path> --goal <text>', options: [...START_OPTIONS, 'visibility-ms'] },
  start: { most: 0, usage: 'stepwise start --agent <path> --goal <text>', options: START_OPTIONS },
  worker: { most: 0, usage: 'stepwise worker --agent <path>', options: ['agent', 'visibility-ms', 'idle-exit-ms', 'stall-ms', 'concurrency'] },
  status: { most: 1, usage: 'stepwise status [<runId>]', options: ['status', 'json', 'cursor', 'last', 'all'] },
  history: { most: 1, usage: 'stepwise history <runId>', options: ['json', 'last', 'all'] },
  watch: { most: 1, usage: 'stepwise watch <runId>', options: [] },
  prune: { most: 0, usage: 'stepwise prune [--older-than-days <n>]', options: ['older-than-days'] },
  drift: { most: 0, usage: 'stepwise drift --agent <new-agent>', options: ['agent', 'json'] },
  show: { most: 1, usage: 'stepwise show <runId> [--step <n>]', options: ['step', 'full', 'json', 'last', 'all'] },
  fork: { most: 1, usage: 'stepwise fork <runId> --from-step <n>', options: ['from-step', ...START_OPTIONS] },
  retry: { most: 1, usage: 'stepwise retry <runId>', options: ['agent', 'step-cap', 'budget-tokens', 'budget-usd'] },
  cancel: { most: 1, usage: 'stepwise cancel <runId>', options: ['agent', 'reason', 'as'] },
  delete: { most: 1, usage: 'stepwise delete <runId>', options: ['json'] },
  serve: { most: 0, usage: 'stepwise serve --agent <path>', options: ['agent', 'port', 'host', 'max-connections', 'max-connections-per-address'] },
  approve: { most: 1, usage: 'stepwise approve <runId>', options: ['agent', 'comment', 'as'] },
  reject: { most: 1, usage: 'stepwise reject <runId>', options: ['agent', 'comment', 'as'] },
  emit: { most: 3, usage: 'stepwise emit <type> <key> [<json>], the JSON quoted as one argument', options: ['agent', 'id'] },
  init: { most: 0, usage: 'stepwise init', options: ['queue-name', 'json'] },
  backup: { most: 1, usage: 'stepwise backup <file>', options: [] },
};

/** What a command says of an option it does not read: the options it does read, and where the rest are. */
function notAnOption(option: string, command: string, takes: (typeof ARGUMENTS)[string]): string {
  const own = takes.options.map((name) => `--${name}`).join(', ');
  // A number that starts with a dash (emit's payload -5) reads as an option unless it comes after --.
  const dashed = takes.most > 0 && /^-[\d.]/.test(option) ? `; an argument that starts with a dash goes after --: stepwise ${command} ... -- ${option}` : '';
  return `${option} is not an option of stepwise ${command}${own ? ` (it takes ${own})` : ''}${dashed}; see stepwise --help`;
}

/**
 * parseArgs, strict. Its refusal of an unknown option (a typo, --verbose) told how to pass a positional
 * argument that starts with a dash, and neither the command's options nor where to find them: it says
 * what a known command says of an option it does not read.
 */
function parseCommandLine(argv: string[]) {
  const args = joinNegativeValues(argv);
  try {
    return parseArgs({ args, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    const option = (error as { code?: unknown }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /^Unknown option '([^']+)'/.exec((error as Error).message)?.[1] : undefined;
    if (option === undefined) throw error;
    // Read again leniently for the command alone: the unknown option is what made the strict read throw.
    const [command] = parseArgs({ args, options: OPTIONS, allowPositionals: true, strict: false }).positionals;
    const takes = command !== undefined && Object.hasOwn(ARGUMENTS, command) ? ARGUMENTS[command] : undefined;
    throw new StepwiseUsageError(takes ? notAnOption(option, command!, takes) : `unknown option ${option}; see stepwise --help`);
  }
}

export async function main(
  argv: string[],
  write: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
  writeError: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
): Promise<number> {
  // Goals, summaries and tool output come from models, programs and events: a terminal control sequence
  // in one is shown, not acted on, whichever command prints it.
  const out = (line: string) => write(printable(line));
  const { values, positionals } = parseCommandLine(argv);
  const [command, arg] = positionals;
  setLogFormat(chooseLogFormat(values.log));
  chooseLogLevel();
  // Asked for, the usage is the command's output; given no command, it is the error's text, on stderr with
  // exit 2, so `stepwise $CMD` with CMD unset does not print 40 lines into what a script reads.
  if (values.help || command === 'help') { out(USAGE); return 0; }
  // The package's version, which each checkpoint records as its code version unless STEPWISE_CODE_VERSION is set.
  if (values.version) { out(`stepwise ${(await import('../version.ts')).packageVersion()}`); return 0; }
  if (!command) { writeError(printable(USAGE)); return 2; }
  const takes = Object.hasOwn(ARGUMENTS, command) ? ARGUMENTS[command] : undefined;
  if (!takes) throw new StepwiseUsageError(`unknown command "${command}"; try stepwise --help`);
  if (positionals.length - 1 > takes.most) {
    throw new StepwiseUsageError(`unexpected argument ${JSON.stringify(positionals[takes.most + 1])}; usage: ${takes.usage}`);
  }
  const unread = (Object.keys(values) as (keyof typeof OPTIONS)[])
    .find((name) => !(STORE_OPTIONS as readonly string[]).includes(name) && !takes.options.includes(name));
  if (unread) throw new StepwiseUsageError(notAnOption(`--${unread}`, command, takes));
  for (const name of NAMING_OPTIONS) {
    if (values[name] === '') throw new StepwiseUsageError(`--${name} is empty (an unset shell variable?): give a value, or leave --${name} out`);
  }
  if (values['older-than-days'] !== undefined && !DECIMAL.test(values['older-than-days'])) {
    throw new StepwiseUsageError(`--older-than-days must be a number of days (0 or more), got ${JSON.stringify(values['older-than-days'])}`);
  }
  const common = {
    ...(values.db ? { db: values.db } : {}), ...(values.agent ? { agent: values.agent } : {}),
    ...(values.backend ? { backend: values.backend } : {}), ...(values.stack ? { stack: values.stack } : {}), ...(values.table ? { table: values.table } : {}),
    ...(values.bucket ? { bucket: values.bucket } : {}), ...(values['queue-url'] ? { queueUrl: values['queue-url'] } : {}),
  };
  const start = {
    ...common,
    ...(values.goal !== undefined ? { goal: values.goal } : {}),
    ...(values['run-id'] ? { runId: values['run-id'] } : {}),
    ...(values['step-cap'] !== undefined ? { stepCap: atLeastOne('step-cap', values['step-cap'])! } : {}),
    ...budgetOf(values['budget-tokens'], values['budget-usd']),
  };
  const visibilityMs = atLeastOne('visibility-ms', values['visibility-ms']);
  const idleExitMs = wholeNumber('idle-exit-ms', values['idle-exit-ms']);
  const stallMs = atLeastOne('stall-ms', values['stall-ms']);
  // One message for every wrong value, so that 2.5 is not told "0 or more" and then 0 "from 1".
  const concurrency = values.concurrency === undefined ? undefined : DIGITS.test(values.concurrency) ? Number(values.concurrency) : Number.NaN;
  if (concurrency !== undefined && !(concurrency >= 1 && concurrency <= MAX_WORKER_CONCURRENCY)) {
    throw new StepwiseUsageError(`--concurrency must be a whole number from 1 to ${MAX_WORKER_CONCURRENCY}, got ${JSON.stringify(values.concurrency)}`);
  }
  const port = wholeNumber('port', values.port);
  if (port !== undefined && port > 65535) throw new StepwiseUsageError(`--port must be from 0 to 65535, got ${port}`);
  const maxConnections = atLeastOne('max-connections', values['max-connections']);
  const maxConnectionsPerAddress = atLeastOne('max-connections-per-address', values['max-connections-per-address']);
  const last = atLeastOne('last', values.last);
  if (last !== undefined && values.all) throw new StepwiseUsageError('--last and --all both say how many steps to show: give one');
  const shown = { ...(last !== undefined ? { last } : {}), ...(values.all ? { all: true } : {}) };
  const read = { ...common, ...shown, ...(values.json ? { json: true } : {}), ...(values.status !== undefined ? { status: values.status } : {}), ...(values.cursor !== undefined ? { cursor: values.cursor } : {}) };
  // Each command's module is imported when it runs: `--help` and `status` start without the SDKs, the
  // HTTP app or the logger that other commands need.
  switch (command) {
    case 'run': return (await import('./commands/run.ts')).runCommand({ ...start, ...(visibilityMs ? { visibilityMs } : {}) }, out);
    case 'start': return (await import('./commands/start.ts')).startCommand(start, out);
    case 'worker': return (await import('./commands/worker.ts')).workerCommand({ ...common, ...(visibilityMs ? { visibilityMs } : {}), ...(idleExitMs !== undefined ? { idleExitMs } : {}), ...(stallMs ? { stallMs } : {}), ...(concurrency ? { concurrency } : {}) }, out);
    case 'status': return (await import('./commands/read.ts')).statusCommand(arg, read, out);
    case 'history': return (await import('./commands/read.ts')).historyCommand(arg, read, out);
    case 'watch': return (await import('./commands/watch.ts')).watchCommand(arg, common, out);
    case 'serve': return (await import('./commands/serve.ts')).serveCommand({
      ...common, ...(port !== undefined ? { port } : {}), ...(values.host ? { host: values.host } : {}),
      ...(maxConnections !== undefined ? { maxConnections } : {}), ...(maxConnectionsPerAddress !== undefined ? { maxConnectionsPerAddress } : {}),
    }, out);
    case 'approve':
    case 'reject':
      return (await import('./commands/answer.ts')).answerCommand(command, arg, { ...common, ...(values.comment !== undefined ? { comment: values.comment } : {}), ...(values.as ? { as: values.as } : {}) }, out);
    case 'init': return (await import('./commands/init.ts')).initCommand({ ...common, ...(values['queue-name'] ? { queueName: values['queue-name'] } : {}), ...(values.json ? { json: true } : {}) }, out);
    case 'backup': return (await import('./commands/backup.ts')).backupCommand(arg, common, out);
    case 'emit': return (await import('./commands/answer.ts')).emitCommand(positionals.slice(1), { ...common, ...(values.id !== undefined ? { id: values.id } : {}) }, out);
    case 'prune': return (await import('./commands/prune.ts')).pruneCommand({ ...common, ...(values['older-than-days'] !== undefined ? { olderThanDays: values['older-than-days'] } : {}) }, out);
    case 'drift': return (await import('./commands/drift.ts')).driftCommand({ ...common, ...(values.json ? { json: true } : {}) }, out);
    case 'show': {
      const step = wholeNumber('step', values.step);
      return (await import('./commands/show.ts')).showCommand(arg, { ...common, ...shown, ...(step !== undefined ? { step } : {}), ...(values.json ? { json: true } : {}), ...(values.full ? { full: true } : {}) }, out);
    }
    case 'fork': {
      const fromStep = wholeNumber('from-step', values['from-step']);
      return (await import('./commands/fork.ts')).forkCommand(arg, { ...start, ...(fromStep !== undefined ? { fromStep } : {}) }, out);
    }
    case 'retry': return (await import('./commands/retry.ts')).retryCommand(arg, start, out);
    case 'delete': return (await import('./commands/delete.ts')).deleteCommand(arg, { ...common, ...(values.json ? { json: true } : {}) }, out);
    case 'cancel':
      return (await import('./commands/cancel.ts')).cancelCommand(arg, { ...common, ...(values.as ? { as: values.as } : {}), ...(values.reason !== undefined ? { reason: values.reason } : {}) }, out);
    default: throw new StepwiseUsageError(`unknown command "${command}"; try stepwise --help`);
  }
}

/** Commands that go on after their first lines and end with an exit code that says how (README: the `stepwise` command). */
const GOES_ON = new Set(['run', 'worker', 'watch', 'serve']);
/** 128 + SIGPIPE (13), as a shell reports a process the signal ended. */
const SIGPIPE_EXIT = 141;

/** The command named on this command line, read leniently (the strict read in `main` reports what is wrong with it). */
function commandOf(argv: string[]): string | undefined {
  try {
    return parseArgs({ args: joinNegativeValues(argv), options: OPTIONS, allowPositionals: true, strict: false }).positionals[0];
  } catch {
    return undefined;
  }
}

/** Runs the CLI on this process's arguments and sets the exit code. */
export async function runCli(): Promise<void> {
  // `stepwise status | head` (or `2>&1 | head`, which closes stderr too): the reader is gone, so is the
  // need to write. Quietly, as Unix tools end on SIGPIPE (which Node ignores, raising EPIPE on the next
  // write instead). Nothing is lost by stopping anywhere: a worker stopped mid-step is a crash its run
  // recovers from.
  const goesOn = GOES_ON.has(commandOf(process.argv.slice(2)) ?? '');
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      // A command whose exit code says how a run or a worker ended (`run | head -1`, `set -o pipefail`), cut
      // off before it ended, did not end so: 141, what a shell reports of a tool SIGPIPE stopped, where 0 read
      // as the run completed. One that only reads had printed what it was asked for by then: 0.
      const name = stream === process.stdout ? 'stdout' : 'stderr';
      if (error.code === 'EPIPE') exitBecause(`its ${name}'s reader went away (a pipe closed, as \`| head\` closes it)`, typeof process.exitCode === 'number' ? process.exitCode : goesOn ? SIGPIPE_EXIT : 0);
      // Any other refusal (stdout on a full disk: ENOSPC; a terminal gone: EIO) was thrown from here as an
      // uncaught exception, a stack trace in place of the one line every other error gets. Said on stderr
      // if it still takes a line, and exit 1 (or the code already set, when the line that failed said why):
      // the output asked for was not all written.
      try {
        writeSync(2, `stepwise: cannot write to ${name}: ${printable(cliErrorLine(error))}\n`);
      } catch {
        // stderr is the stream that failed, or fails too: the exit code is all that is left to say it.
      }
      process.exit(typeof process.exitCode === 'number' && process.exitCode !== 0 ? process.exitCode : 1);
    });
  }
  try {
    process.exitCode = await main(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`stepwise: ${printable(cliErrorLine(error))}\n`);
    process.exitCode = cliExitCode(error);
  }
}

/**
 * Bad input is the user's to fix: exit code 2, its line saying what to fix. Anything else is ours: exit 1.
 * A run of a newer format than this release reads (an approve, cancel, show or fork after a rollback) is
 * the user's too: run again with this release it is refused again, where exit 1 asked for just that.
 */
export function cliExitCode(error: unknown): 1 | 2 {
  const userError = error instanceof StepwiseError && (error.permanent || error instanceof StepwiseUsageError || error instanceof NewerFormatError);
  const parseError = error instanceof TypeError && 'code' in error && String((error as { code: unknown }).code).startsWith('ERR_PARSE_ARGS');
  return userError || parseError || readOnlyDatabase(error) || isDamaged(error) || awsRefusal(error) ? 2 : 1;
}

/**
 * SQLite refused to write the file, its directory (where the -wal and -shm files go) or its -shm: the
 * permissions or the mount are the user's to fix, like any --db path that cannot hold a database (exit 2).
 * DBMOVED is not among them: the file was deleted or replaced under an open connection.
 */
export function readOnlyDatabase(error: unknown): boolean {
  const code = String((error as { code?: unknown })?.code ?? '');
  return code === 'SQLITE_READONLY' || (code.startsWith('SQLITE_READONLY_') && code !== 'SQLITE_READONLY_DBMOVED');
}

/** The one line the CLI prints for an error that stops a command. */
export function cliErrorLine(error: unknown): string {
  // One line, whatever the message: parseArgs and tsx write theirs over several.
  const line = String((error as Error)?.message ?? error).trim().replace(/\s*\n\s*/g, ' ');
  // SQLite's own words name neither the file nor what to do; nothing is lost, and that is worth saying.
  if (isDiskFull(error)) {
    return `${line}: free space on the disk that holds the database (--db, STEPWISE_DB), then run the command again; each run continues from its last checkpoint`;
  }
  // A process frozen inside its commit, or a sqlite3 shell left in a transaction: nothing to fix but waiting.
  if (isBusy(error)) return `${line}: ${lockedDatabaseHint('the database (--db, STEPWISE_DB)')}`;
  // Found past the open (a page a query reads): the same file to mend, which running again will not.
  if (isDamaged(error)) return `${line}: ${damagedDatabaseHint('the database (--db, STEPWISE_DB)')}`;
  // AWS refused the credentials, the permission or the KMS key: the same on every try, and the user's to fix,
  // like credentials not set at all (exit 2). Its own words are often bare ("The security token included in
  // the request is invalid.") and said neither that nor what to do.
  const refusal = awsRefusal(error);
  if (refusal) return `${(error as Error).name}: ${line.replace(/\.$/, '')}: ${refusalFix(refusal)}`;
  if (error instanceof StaleVersionError) return movedOnText(error);
  if (readOnlyDatabase(error)) {
    return `${line}: this user cannot write the database (--db, STEPWISE_DB) or the directory that holds it, where SQLite keeps its -wal and -shm files; give write access to both, or pick another --db`;
  }
  return line;
}
