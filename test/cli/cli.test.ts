import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { writeCutShortFile, writeOverwrittenFile } from '../support/damaged-files.ts';
import { tempDb } from '../support/harness.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BIN = join(ROOT, 'bin/stepwise.js');
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const db = tempDb();
// Agent modules in a directory with no package.json, where a .ts module is CommonJS: one that loads, one
// with a syntax error (tsx's message spans lines), and one that throws at import.
const agentModules = mkdtempSync(join(tmpdir(), 'stepwise-agents-'));
writeFileSync(join(agentModules, 'plain.ts'), "export default { name: 'plain', tools: [] };\n");
writeFileSync(join(agentModules, 'syntax.ts'), 'export default {\n');
writeFileSync(join(agentModules, 'throws.mjs'), "throw new Error('DATABASE_URL is not set');\n");
writeFileSync(join(agentModules, 'not-a-database.db'), 'not SQLite at all\n'.repeat(100));
writeCutShortFile(join(agentModules, 'cut-short.db'));
writeOverwrittenFile(join(agentModules, 'overwritten.db'), 'runs');
afterAll(() => { db.cleanup(); rmSync(agentModules, { recursive: true, force: true }); });

function stepwise(...args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: ROOT, encoding: 'utf8', timeout: 60_000,
    env: { ...process.env, STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '3', STEPWISE_LOG_LEVEL: 'info' },
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('the stepwise command', () => {
  it('start enqueues a run; a repeated start with the same id is a no-op that says so', () => {
    const first = stepwise('start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'cli-1');
    expect(first.code).toBe(0);
    expect(first.out.trim()).toBe(`started run cli-1 (agent process-rows); \`stepwise worker --agent ${AGENT}\` works it`);
    const again = stepwise('start', '--agent', AGENT, '--goal', 'something else', '--run-id', 'cli-1');
    expect(again.code).toBe(0);
    expect(again.out).toContain('run cli-1 already exists (status running, version 1): nothing changed');
  });

  it('worker works the queue and logs every checkpoint write as JSON with run id, step, version, worker and size', () => {
    const w = stepwise('worker', '--agent', AGENT, '--idle-exit-ms', '300');
    expect(w.code).toBe(0);
    expect(w.out).toMatch(/run cli-1 v2 {2}step 1 {2}write_row {2}ok/);
    expect(w.out).toContain('completed after 3 steps: wrote 3 rows');
    const logs = w.err.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === 'checkpoint');
    expect(logs.map((l) => l.version)).toEqual([2, 3, 4, 5]);
    for (const l of logs) {
      expect(l).toMatchObject({ runId: 'cli-1', workerId: expect.stringMatching(/-\d+$/) });
      expect(typeof l.step).toBe('number');
      expect(l.bytes).toBeGreaterThan(0);
    }
  });

  it('status shows a table of runs, one run in detail, and --json', () => {
    const all = stepwise('status');
    expect(all.out).toMatch(/RUN\s+STATUS\s+STEP\s+VERSION/);
    expect(all.out).toMatch(/cli-1\s+completed\s+3\s+5\s+process-rows/);
    const one = stepwise('status', 'cli-1');
    expect(one.out).toContain('status   completed');
    expect(one.out).toContain('summary  wrote 3 rows');
    const json = JSON.parse(stepwise('status', 'cli-1', '--json').out) as { status: string; version: number; steps: unknown[] };
    expect(json).toMatchObject({ status: 'completed', version: 5 });
    expect(json.steps).toHaveLength(3);
  });

  it('history prints the checkpoint timeline, and --json', () => {
    const h = stepwise('history', 'cli-1');
    expect(h.out).toMatch(/VERSION\s+STEP\s+STATUS\s+TOOL\s+IDEMPOTENCY KEY\s+WORKER\s+BYTES\s+TOKENS\s+COST\s+TIME/);
    expect(h.out).toMatch(/3\s+2\s+running\s+write_row\s+cli-1\/step-2/);
    const rows = JSON.parse(stepwise('history', 'cli-1', '--json').out) as { version: number; step: number; status: string }[];
    expect(rows.map((r) => [r.version, r.step, r.status])).toEqual([[1, 0, 'running'], [2, 1, 'running'], [3, 2, 'running'], [4, 3, 'running'], [5, 3, 'completed']]);
  });

  it('run starts and works a run in the foreground with live progress', () => {
    const r = stepwise('run', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'cli-2');
    expect(r.code).toBe(0);
    expect(r.out).toContain('model: offline scripted model "process-test-rows"');
    expect(r.out.match(/step \d {2}write_row {2}ok/g)).toHaveLength(3);
    expect(r.out).toContain('run cli-2: completed at version 5');
  });

  it('run exits 3 for a run that ended without completing (here at its step cap), where a crash of stepwise is 1', () => {
    const r = stepwise('run', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'cli-capped', '--step-cap', '1');
    expect(r.out).toMatch(/run cli-capped: (capped|failed) at version \d+/);
    expect(r.code).toBe(3);
  });

  it('given no command, prints its usage on stderr with exit 2, nothing on stdout; --help prints it on stdout', () => {
    const none = stepwise();
    expect(none.code).toBe(2);
    expect(none.out).toBe('');
    expect(none.err).toContain('usage:');
    const help = stepwise('--help');
    expect(help.code).toBe(0);
    expect(help.out).toContain('exit codes: 0 done; 1 a failure of stepwise');
    expect(help.err).toBe('');
  });

  it('--version and -V print the package\'s version, whatever STEPWISE_CODE_VERSION says', () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const r = spawnSync(process.execPath, [BIN, flag], { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, STEPWISE_CODE_VERSION: 'deploy-42' } });
      expect(r.status).toBe(0);
      expect(r.stdout).toBe(`stepwise ${version}\n`);
    }
  });

  it('loads a TypeScript agent from outside any ES module package (a CommonJS module there)', () => {
    const r = stepwise('drift', '--agent', join(agentModules, 'plain.ts'));
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain('runs of agent plain: this code and agent can resume every one');
  });

  it('loads a plain JavaScript agent module too', () => {
    const r = stepwise('run', '--agent', join(ROOT, 'test/support/js-agent.mjs'), '--goal', 'echo', '--run-id', 'cli-js');
    expect(r.code).toBe(0);
    expect(r.out).toContain('step 1  echo  ok: hello from js');
    expect(r.out).toContain('completed after 1 step: echoed once');
  });

  it.each([
    [['status', 'no-such-run'], 'stepwise: unknown run: no-such-run'],
    [['history', 'no-such-run'], 'stepwise: unknown run: no-such-run'],
    [['start', '--goal', 'x'], 'stepwise: --agent path/to/agent.ts is required'],
    [['start', '--agent', AGENT, '--goal', ''], 'stepwise: the goal is empty'],
    // Left out, the goal is named as the flag to give, not called empty.
    [['start', '--agent', AGENT], 'stepwise: --goal "what the run should achieve" is required'],
    [['run', '--agent', AGENT], 'stepwise: --goal "what the run should achieve" is required, or --run-id of a run to work on'],
    [['start', '--agent', join(ROOT, 'package.json'), '--goal', 'x'], 'does not export an agent'],
    [['start', '--agent', 'no/such/agent.ts', '--goal', 'x'], `stepwise: no agent module at no/such/agent.ts (${join(ROOT, 'no/such/agent.ts')} does not exist)`],
    [['worker', '--agent', join(agentModules, 'syntax.ts')], `stepwise: cannot load agent ${join(agentModules, 'syntax.ts')}: Transform failed with 1 error:`],
    [['drift', '--agent', join(agentModules, 'throws.mjs')], `stepwise: cannot load agent ${join(agentModules, 'throws.mjs')}: DATABASE_URL is not set`],
    [['fly'], 'stepwise: unknown command "fly"'],
    // An unknown option is told the command's options, as one it does not read is, not parseArgs' syntax.
    [['status', '--bogus'], 'stepwise: --bogus is not an option of stepwise status (it takes --status, --json, --cursor, --last, --all); see stepwise --help'],
    [['--verbose', 'status'], 'stepwise: --verbose is not an option of stepwise status (it takes --status, --json, --cursor, --last, --all); see stepwise --help'],
    [['--verbose'], 'stepwise: unknown option --verbose; see stepwise --help'],
    [['emit', 'reading', 'sensor-1', '-5'], 'stepwise: -5 is not an option of stepwise emit (it takes --agent, --id); an argument that starts with a dash goes after --: stepwise emit ... -- -5; see stepwise --help'],
    [['worker', '--agent', AGENT, '--visibility-ms', 'soon'], 'stepwise: --visibility-ms must be a whole number'],
    [['worker', '--agent', AGENT, '--concurrency', '0'], 'stepwise: --concurrency must be a whole number from 1 to 256, got "0"'],
    [['worker', '--agent', AGENT, '--concurrency', '1000'], 'stepwise: --concurrency must be a whole number from 1 to 256, got "1000"'],
    [['serve', '--agent', AGENT, '--port', '99999'], 'stepwise: --port must be from 0 to 65535, got 99999'],
    [['serve', '--agent', AGENT, '--max-connections', '0'], 'stepwise: --max-connections must be a whole number (1 or more), got "0"'],
    [['serve', '--agent', AGENT, '--max-connections', '4', '--max-connections-per-address', '8'], 'stepwise: --max-connections-per-address (8) is over --max-connections (4): one address cannot hold more than every connection'],
    // Node's recursive mkdir loops forever under /proc (ENOENT for a child of a directory that exists): the
    // spawn's timeout would leave the code null.
    [['start', '--agent', AGENT, '--goal', 'x', '--db', '/proc/stepwise-nope/x.db'], 'stepwise: cannot open the database /proc/stepwise-nope/x.db: cannot make the directory /proc/stepwise-nope (ENOENT)'],
    // A command that only reads or answers makes no database: a mistyped --db is not an empty store.
    [['status', '--db', join(agentModules, 'typo', 'x.db')], `stepwise: no stepwise database at ${join(agentModules, 'typo', 'x.db')}: check --db or STEPWISE_DB; stepwise run, start or init makes one`],
    [['approve', 'r1', '--db', 'typo.db'], `stepwise: no stepwise database at typo.db (${join(ROOT, 'typo.db')}): check --db or STEPWISE_DB; stepwise run, start or init makes one`],
    [['status', '--db', join(agentModules, 'not-a-database.db')], `stepwise: cannot open the database ${join(agentModules, 'not-a-database.db')}: file is not a database`],
    [['status', '--db', agentModules], `stepwise: cannot open the database ${agentModules}: unable to open database file`],
    // A damaged file, found as it opens (named) or by the query that reads the page (the flag named): no retry mends it.
    [['status', '--db', join(agentModules, 'cut-short.db')], `stepwise: cannot open the database ${join(agentModules, 'cut-short.db')}: database disk image is malformed: the file is damaged (cut short, or overwritten in part), which no retry mends: stop the workers on it, then restore it from a backup, or recover what it holds into a new file (sqlite3 ${join(agentModules, 'cut-short.db')} .recover | sqlite3 recovered.db) and use that, or pick another --db`],
    [['status', '--db', join(agentModules, 'overwritten.db')], 'stepwise: database disk image is malformed: the database (--db, STEPWISE_DB) is damaged (cut short, or overwritten in part), which no retry mends'],
    // A negative number reaches the option's own check, not parseArgs' paragraph on `--opt=-XYZ`.
    [['prune', '--older-than-days', '-3'], 'stepwise: --older-than-days must be a number of days (0 or more), got "-3"'],
    [['fork', 'no-such-run', '--from-step', '-1'], 'stepwise: --from-step must be a whole number (0 or more), got "-1"'],
    [['worker', '--agent', AGENT, '--visibility-ms', '-5'], 'stepwise: --visibility-ms must be a whole number (1 or more), got "-5"'],
    // 0 where it means nothing is refused, not dropped for the default without a word.
    [['start', '--agent', AGENT, '--goal', 'x', '--step-cap', '0'], 'stepwise: --step-cap must be a whole number (1 or more), got "0"'],
    [['run', '--agent', AGENT, '--goal', 'x', '--step-cap', '-2'], 'stepwise: --step-cap must be a whole number (1 or more), got "-2"'],
    [['worker', '--agent', AGENT, '--visibility-ms', '0'], 'stepwise: --visibility-ms must be a whole number (1 or more), got "0"'],
    [['worker', '--agent', AGENT, '--stall-ms', '0'], 'stepwise: --stall-ms must be a whole number (1 or more), got "0"'],
  ])('%j fails with exit code 2 and a one-line reason', (args, message) => {
    const r = stepwise(...args);
    expect(r.code).toBe(2);
    expect(r.err).toContain(message);
    expect(r.err.trim().split('\n')).toHaveLength(1);
  });

  it('makes no file or folder at a --db that a reading or answering command was given and that is not there', () => {
    const typo = join(agentModules, 'typo-dir', 'runs.db');
    for (const args of [['status'], ['history', 'r1'], ['show', 'r1'], ['cancel', 'r1'], ['retry', 'r1'], ['fork', 'r1', '--from-step', '0'], ['reject', 'r1'], ['prune'], ['drift', '--agent', AGENT]]) {
      const r = stepwise(...args, '--db', typo);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err).toContain(`no stepwise database at ${typo}`);
    }
    expect(existsSync(join(agentModules, 'typo-dir'))).toBe(false);
    expect(existsSync(join(ROOT, 'typo.db'))).toBe(false);
  });
});
