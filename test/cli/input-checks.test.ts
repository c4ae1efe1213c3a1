import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../support/cli.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { tempDb } from '../support/harness.ts';

const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());

function stepwise(...args: string[]) {
  // A timeout, so a value read as another number (a worker that never idles out) fails the case, not the run.
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: ROOT, encoding: 'utf8', timeout: 60_000,
    env: { ...process.env, STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '2', STEPWISE_LOG_LEVEL: 'warn' },
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

const runIds = () => stepwise('status').out.trim().split('\n').slice(1).map((l) => l.split(/\s+/)[0]).sort();

// What a terminal would act on: OSC (retitle, ended by BEL), CSI (recolour), and C1's one-byte CSI.
const GOAL = 'copy \x1b]0;pwned\x07 the \x1b[31mrows\x1b[0m \x9b2J now\r';

beforeAll(() => {
  expect(stepwise('start', '--agent', AGENT, '--goal', GOAL, '--run-id', 'in-1').code).toBe(0);
  expect(stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '300').code).toBe(0);
}, 120_000);

describe('the command line refuses input it would otherwise misread', { timeout: 120_000 }, () => {
  // Number() reads "" as 0 and " 2", "0x2", "2e0" as 2: each would fork, show or cap something else than asked.
  it.each([
    [['fork', 'in-1', '--from-step', ''], '--from-step must be a whole number (0 or more), got ""'],
    [['fork', 'in-1', '--from-step', '0x2'], '--from-step must be a whole number (0 or more), got "0x2"'],
    [['fork', 'in-1', '--from-step', ' 2'], '--from-step must be a whole number (0 or more), got " 2"'],
    [['fork', 'in-1', '--from-step', '1e0'], '--from-step must be a whole number (0 or more), got "1e0"'],
    [['fork', 'in-1', '--from-step', '1.0'], '--from-step must be a whole number (0 or more), got "1.0"'],
    [['show', 'in-1', '--step', ''], '--step must be a whole number (0 or more), got ""'],
    [['show', 'in-1', '--step', '0x1'], '--step must be a whole number (0 or more), got "0x1"'],
    [['fork', 'in-1', '--from-step', '1', '--step-cap', '0x9'], '--step-cap must be a whole number (1 or more), got "0x9"'],
    [['retry', 'in-1', '--step-cap', ' 9'], '--step-cap must be a whole number (1 or more), got " 9"'],
    [['start', '--agent', AGENT, '--goal', 'x', '--budget-tokens', '1e3'], '--budget-tokens must be a whole number above 0, got "1e3"'],
    [['start', '--agent', AGENT, '--goal', 'x', '--budget-usd', '0x2'], '--budget-usd must be a number above 0 (dollars, in plain decimals: 0.000001, not 1e-6), got "0x2"'],
    // Above 0, but an exponent: the message says which form is read.
    [['start', '--agent', AGENT, '--goal', 'x', '--budget-usd', '1e-9'], '--budget-usd must be a number above 0 (dollars, in plain decimals: 0.000001, not 1e-6), got "1e-9"'],
    [['worker', '--agent', AGENT, '--idle-exit-ms', ''], '--idle-exit-ms must be a whole number (0 or more), got ""'],
    [['worker', '--agent', AGENT, '--idle-exit-ms', '300', '--visibility-ms', ' 5'], '--visibility-ms must be a whole number (1 or more), got " 5"'],
    [['worker', '--agent', AGENT, '--idle-exit-ms', '300', '--stall-ms', '1e3'], '--stall-ms must be a whole number (1 or more), got "1e3"'],
    [['worker', '--agent', AGENT, '--idle-exit-ms', '300', '--concurrency', '0x2'], '--concurrency must be a whole number from 1 to 256, got "0x2"'],
    [['worker', '--agent', AGENT, '--idle-exit-ms', '300', '--concurrency', '2.5'], '--concurrency must be a whole number from 1 to 256, got "2.5"'],
    [['worker', '--agent', AGENT, '--idle-exit-ms', '300', '--concurrency', '0'], '--concurrency must be a whole number from 1 to 256, got "0"'],
    [['prune', '--older-than-days', ''], '--older-than-days must be a number of days (0 or more), got ""'],
    [['prune', '--older-than-days', '0x2'], '--older-than-days must be a number of days (0 or more), got "0x2"'],
    // `--status "$S"` with S unset listed every run, as if no filter had been asked for.
    [['status', '--status', ''], '--status must be one of running, waiting, completed, failed, capped, over-budget, cancelled, got ""'],
    [['status', '--status', 'done', '--json'], '--status must be one of running, waiting, completed, failed, capped, over-budget, cancelled, got "done"'],
    // With a run id they were dropped: the run shown whatever its status.
    [['status', 'in-1', '--status', 'failed'], '--status and --cursor choose the runs of the table; with a run id, status shows that run whatever its status: leave them out, or the run id'],
    [['status', 'in-1', '--cursor', 'abc', '--json'], '--status and --cursor choose the runs of the table; with a run id, status shows that run whatever its status: leave them out, or the run id'],
  ])('%j: exit 2, naming the option', (args, message) => {
    const before = runIds();
    const r = stepwise(...args);
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe(`stepwise: ${message}`);
    expect(runIds()).toEqual(before);
  });

  // An unset shell variable (`--run-id "$ID"`) would make a random id: each repeat another run.
  it.each([
    [['start', '--agent', AGENT, '--goal', 'x', '--run-id', '']],
    [['run', '--agent', AGENT, '--goal', 'x', '--run-id', '']],
    [['fork', 'in-1', '--from-step', '1', '--run-id', '']],
  ])('%j: an empty --run-id is refused, no run made', (args) => {
    const before = runIds();
    const r = stepwise(...args);
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe('stepwise: --run-id is empty (an unset shell variable?): give a value, or leave --run-id out');
    expect(runIds()).toEqual(before);
  });

  // Every option parses for every command: one the command does not read was dropped without a word.
  it.each([
    [['worker', '--agent', AGENT, '--idle-exit-ms', '300', '--budget-usd', '1'], '--budget-usd is not an option of stepwise worker (it takes --agent, --visibility-ms, --idle-exit-ms, --stall-ms, --concurrency)'],
    [['approve', 'in-1', '--reason', 'checked'], '--reason is not an option of stepwise approve (it takes --agent, --comment, --as)'],
    [['status', '--step-cap', '3'], '--step-cap is not an option of stepwise status (it takes --status, --json, --cursor, --last, --all)'],
    [['prune', '--json'], '--json is not an option of stepwise prune (it takes --older-than-days)'],
    [['start', '--agent', AGENT, '--goal', 'x', '--concurrency', '4'], '--concurrency is not an option of stepwise start (it takes --agent, --goal, --run-id, --step-cap, --budget-tokens, --budget-usd)'],
  ])('%j: an option the command does not read is refused', (args, message) => {
    const before = runIds();
    const r = stepwise(...args);
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe(`stepwise: ${message}; see stepwise --help`);
    expect(r.out).toBe('');
    expect(runIds()).toEqual(before);
  });

  it('cancel with --comment (approve\'s option) is refused, and the run is not cancelled without its reason', async () => {
    expect(stepwise('start', '--agent', AGENT, '--goal', 'x', '--run-id', 'in-opt').code).toBe(0);
    // A worker has the run's message, as while it works a step: a cancel is a request for that worker to apply.
    const runtime = openLocalRuntime({ dbPath: db.path });
    expect(await runtime.queue.forRun('in-opt').receive({ visibilityMs: 600_000 })).toHaveLength(1);
    const r = stepwise('cancel', 'in-opt', '--comment', 'started by mistake');
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe('stepwise: --comment is not an option of stepwise cancel (it takes --agent, --reason, --as); see stepwise --help');
    const cancelOf = () => (JSON.parse(stepwise('status', 'in-opt', '--json').out) as { cancelRequested?: string }).cancelRequested;
    expect(cancelOf()).toBeUndefined();
    expect(stepwise('cancel', 'in-opt', '--reason', 'started by mistake').code).toBe(0);
    expect(cancelOf()).toMatch(/: started by mistake$/);
    // A second cancel keeps the first request, and says so rather than present it as its own.
    const again = stepwise('cancel', 'in-opt', '--reason', 'another reason', '--as', 'someone-else');
    expect(again.code).toBe(0);
    expect(again.out.trim()).toMatch(/^a cancel was already requested for run in-opt \(by \S+ at \S+: started by mistake\): that request stands; it stops at its next step boundary, when a worker takes its next message \(sent again, should it have been lost\)$/);
    expect(cancelOf()).toMatch(/: started by mistake$/);
    runtime.close();
  });

  it('emit refuses an empty --id and an argument past the payload', () => {
    const noId = stepwise('emit', 'order.paid', 'order-1', '--id', '');
    expect(noId.code).toBe(2);
    expect(noId.err.trim()).toBe('stepwise: --id is empty (an unset shell variable?): give a value, or leave --id out');
    expect(noId.out).toBe('');
    const extra = stepwise('emit', 'order.paid', 'order-1', '{}', 'extra');
    expect(extra.code).toBe(2);
    expect(extra.err.trim()).toBe('stepwise: unexpected argument "extra"; usage: stepwise emit <type> <key> [<json>], the JSON quoted as one argument');
    expect(extra.out).toBe('');
  });

  it.each([
    [['status', 'in-1', 'in-2'], '"in-2"; usage: stepwise status [<runId>]'],
    [['show', 'in-1', '2'], '"2"; usage: stepwise show <runId> [--step <n>]'],
    [['cancel', 'in-1', 'now'], '"now"; usage: stepwise cancel <runId>'],
    [['start', 'in-9', '--agent', AGENT, '--goal', 'x'], '"in-9"; usage: stepwise start --agent <path> --goal <text>'],
  ])('%j: an argument the command does not take is refused', (args, message) => {
    const before = runIds();
    const r = stepwise(...args);
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe(`stepwise: unexpected argument ${message}`);
    expect(runIds()).toEqual(before);
  });
});

describe('next commands', { timeout: 120_000 }, () => {
  it('start and fork print a next command that reads the store they were given, quoted for the shell', () => {
    const started = stepwise('start', '--agent', AGENT, '--goal', 'x', '--run-id', 'in-next', '--db', db.path, '--backend', 'local');
    expect(started.out.trim()).toBe(`started run in-next (agent process-rows); \`stepwise worker --agent ${AGENT} --db ${db.path} --backend local\` works it`);
    const forked = stepwise('fork', 'in-1', '--from-step', '1', '--run-id', 'in-next-f', '--db', db.path);
    expect(forked.out.trim()).toContain(`\`stepwise run --agent <path> --db ${db.path} --run-id in-next-f\``);
    expect(stepwise('cancel', 'in-next').code).toBe(0);
    expect(stepwise('cancel', 'in-next-f').code).toBe(0);
  });
});

describe('text for the terminal', { timeout: 120_000 }, () => {
  it('status and show write control characters in a goal as escapes, not to the terminal', () => {
    const escaped = 'copy \\u001b]0;pwned\\u0007 the \\u001b[31mrows\\u001b[0m \\u009b2J now\\u000d';
    for (const args of [['status', 'in-1'], ['show', 'in-1'], ['show', 'in-1', '--full'], ['show', 'in-1', '--step', '1']]) {
      const r = stepwise(...args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.out, args.join(' ')).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
      expect(r.out, args.join(' ')).toContain(`goal     ${escaped}`);
    }
    // --json was JSON already; it stays the same JSON, C1 escaped too.
    const json = stepwise('status', 'in-1', '--json');
    expect(json.out).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect((JSON.parse(json.out) as { goal: string }).goal).toBe(GOAL);
  });
});
