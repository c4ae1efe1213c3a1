import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, startCli, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { META, newState, recordFor } from '../support/states.ts';
import { watchRun } from '../../lib/cli/commands/watch.ts';
import { retryState } from '../../lib/core/operate.ts';
import type { RunState, StepRecord } from '../../lib/core/state.ts';
import { complete, completeStep, recordFailure } from '../../lib/core/transitions.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import type { CheckpointStore } from '../../lib/ports.ts';

/**
 * `stepwise watch`: another process's view of a run the workers move, line by line, to its end. Real
 * processes: the watch and the workers share only the database file.
 */
const AGENT = join(ROOT, 'test/support/process-agent.ts');
const APPROVAL_AGENT = join(ROOT, 'test/support/approval-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());
const env = {
  STEPWISE_DB: db.path, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'effects.db'), PROCESS_AGENT_ROWS: '3',
  ANTHROPIC_API_KEY: '', STEPWISE_LOG_LEVEL: undefined, STEPWISE_LOG_FORMAT: undefined,
};
const lines = (out: string) => out.trim().split('\n');

describe('stepwise watch', () => {
  it('prints each step as a worker elsewhere writes it, then the end, and exits 0 when the run completed', { timeout: 120_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'w-1'], env)).code).toBe(0);
    // The watch has had its first look before the worker starts: every step comes after it.
    const watching = startCli(['watch', 'w-1'], env);
    expect(await watching.firstLine).toBe('run w-1 v1  running at step 0');
    expect((await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1000'], env)).code).toBe(0);
    const watched = await watching.done;
    expect(watched.code, watched.err).toBe(0);
    expect(lines(watched.out)).toEqual([
      'run w-1 v1  running at step 0',
      expect.stringMatching(/^run w-1 v\d+ {2}step 1 {2}write_row {2}ok: .* \(\d+ B, key w-1\/step-1\)$/),
      expect.stringMatching(/^run w-1 v\d+ {2}step 2 {2}write_row {2}ok: .* \(\d+ B, key w-1\/step-2\)$/),
      expect.stringMatching(/^run w-1 v\d+ {2}step 3 {2}write_row {2}ok: .* \(\d+ B, key w-1\/step-3\)$/),
      expect.stringMatching(/^run w-1 v\d+ {2}completed after 3 steps: /),
    ]);
    // Watched again once it has ended: the end at once.
    const again = await stepwiseCli(['watch', 'w-1'], env);
    expect(again.code).toBe(0);
    expect(lines(again.out)).toEqual([expect.stringMatching(/^run w-1 v\d+ {2}completed after 3 steps: /)]);
  });

  it('whose reader is gone before its first line (`| true`) exits 141, as `run` does, not 0 as though the run had completed', { timeout: 120_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'w-pipe'], env)).code).toBe(0);
    const child = spawn('bash', ['-c', `"${process.execPath}" "${BIN}" watch w-pipe | true; echo "exit \${PIPESTATUS[0]}"`], { cwd: ROOT, env: { ...process.env, ...env } as NodeJS.ProcessEnv });
    let out = '';
    child.stdout.on('data', (d: Buffer) => { out += d; });
    await new Promise((resolve) => child.on('exit', resolve));
    expect(out.trim()).toBe('exit 141');
  });

  it('exits 3 for a run that ended without completing, and 2 for a run that is not there', { timeout: 120_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'w-capped', '--step-cap', '1'], env)).code).toBe(0);
    expect((await stepwiseCli(['worker', '--agent', AGENT, '--idle-exit-ms', '1000'], env)).code).toBe(0);
    const capped = await stepwiseCli(['watch', 'w-capped'], env);
    expect(capped.code).toBe(3);
    expect(lines(capped.out)).toEqual([expect.stringMatching(/^run w-capped v\d+ {2}capped: step cap of 1 reached/)]);
    const nobody = await stepwiseCli(['watch', 'nobody'], env);
    expect(nobody.code).toBe(2);
    expect(nobody.err.trim()).toBe('stepwise: unknown run: nobody');
    expect((await stepwiseCli(['watch'], env)).code).toBe(2);
  });

  it('stopped, says where it was and exits as the signal would have: 130 for Ctrl-C, 143 for the SIGTERM of timeout', { timeout: 120_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'w-stop'], env)).code).toBe(0);
    for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
      // SIGTERM read as Ctrl-C (130): `timeout --preserve-status` and a supervisor saw an interrupt by hand.
      const child = spawn(process.execPath, [BIN, 'watch', 'w-stop'], { cwd: ROOT, env: { ...process.env, ...env } });
      let out = '';
      let sent = false;
      child.stdout.on('data', (d: Buffer) => {
        out += d;
        // Once: a second signal stops the command at once, as it does `worker` and `run`.
        if (!sent && out.includes('\n')) sent = child.kill(signal);
      });
      const exitCode = await new Promise((done) => child.on('exit', done));
      expect(exitCode, signal).toBe(code);
      expect(lines(out)).toEqual(['run w-stop v1  running at step 0', 'stopped watching run w-stop at version 1: the run goes on']);
    }
  });

  it('a running run this code cannot read (newer code wrote it): said, exit 2, not the 3 of a run that ended', { timeout: 60_000 }, async () => {
    expect((await stepwiseCli(['start', '--agent', AGENT, '--goal', 'write 3 rows', '--run-id', 'w-newer'], env)).code).toBe(0);
    const file = new Database(db.path);
    file.prepare("UPDATE checkpoints SET head = json_set(head, '$.formatVersion', 99) WHERE run_id = 'w-newer'").run();
    file.close();
    const watched = await stepwiseCli(['watch', 'w-newer'], env);
    expect(watched.code).toBe(2);
    expect(watched.out).toMatch(/^run w-newer v1 {2}running: this code cannot read it: /);
  });

  it('follows a run through its wait: the wait, its answer, the rest', { timeout: 120_000 }, async () => {
    const approvalEnv = { ...env, EFFECTS_DB: db.path.replace(/stepwise\.db$/, 'approval-effects.db') };
    expect((await stepwiseCli(['start', '--agent', APPROVAL_AGENT, '--goal', 'copy, then drop', '--run-id', 'w-wait'], approvalEnv)).code).toBe(0);
    const watching = startCli(['watch', 'w-wait'], approvalEnv);
    expect(await watching.firstLine).toBe('run w-wait v1  running at step 0');
    expect((await stepwiseCli(['worker', '--agent', APPROVAL_AGENT, '--idle-exit-ms', '1000'], approvalEnv)).code).toBe(0);
    expect((await stepwiseCli(['approve', 'w-wait', '--agent', APPROVAL_AGENT], approvalEnv)).code).toBe(0);
    expect((await stepwiseCli(['worker', '--agent', APPROVAL_AGENT, '--idle-exit-ms', '1000'], approvalEnv)).code).toBe(0);
    const watched = await watching.done;
    expect(watched.code, watched.err).toBe(0);
    const out = watched.out;
    expect(out).toMatch(/^run w-wait v\d+ {2}step 2 {2}waiting for approval by ops@example\.com until \S+$/m);
    expect(out).toMatch(/^run w-wait v\d+ {2}step 2 {2}request_approval {2}ok: \{"approval":"approved"/m);
    expect(out).toMatch(/^run w-wait v\d+ {2}step 3 {2}drop_table {2}ok: /m);
    expect(lines(out).at(-1)).toMatch(/^run w-wait v\d+ {2}completed after 3 steps: /);
    // In order, each once.
    const order = ['write_row', 'waiting for approval', 'request_approval', 'drop_table', 'completed after'].map((text) => out.indexOf(text));
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(out.split('waiting for approval').length).toBe(2);
  });
});

/**
 * The watch's looks, in this process: checkpoints written to the store between looks (a run that moves
 * faster than the poll), and what each look reads.
 */
describe('watchRun', () => {
  type Write = () => Promise<void>;
  /** A store whose nth load first writes the checkpoints `between[n]`: the run moved since the last look. */
  function storeWithWrites(dbPath: string, between: Write[][]) {
    const runtime = openLocalRuntime({ dbPath });
    const loads: { options: unknown; records: number }[] = [];
    const store = new Proxy(runtime.store, {
      get(target, name, receiver) {
        if (name !== 'load') return Reflect.get(target, name, receiver);
        return async (runId: string, options?: { afterStep?: number; recent?: boolean }) => {
          for (const write of between[loads.length] ?? []) await write();
          const stored = await target.load(runId, options);
          loads.push({ options, records: stored?.steps.length ?? 0 });
          return stored;
        };
      },
    });
    return { runtime, store, loads };
  }
  const watchOf = async (store: CheckpointStore, runId: string) => {
    const lines: string[] = [];
    const stop = new AbortController();
    const ended = await watchRun(store, runId, { pollMs: 1, signal: stop.signal, out: (line) => lines.push(line) });
    return { ended, lines };
  };

  it('a look reads the head and the records written since the last, not every record of the run', async () => {
    const file = tempDb();
    try {
      let state = newState('long');
      const runtime = openLocalRuntime({ dbPath: file.path });
      let version = (await runtime.store.create(state, META)).version;
      const step = async () => {
        const record = recordFor('long', state.step + 1);
        state = completeStep(state, record, 4_000 + state.step);
        version = (await runtime.store.commit({ runId: 'long', expectedVersion: version, state, appended: record, ...META })).version;
      };
      for (let n = 0; n < 50; n++) await step();
      // Looks 1-3 find the run at step 50; before look 4 it takes one step more, and before look 6 it completes.
      const between: Write[][] = [[], [], [], [step], [], [async () => {
        state = complete(state, 'done', undefined, 9_000);
        version = (await runtime.store.commit({ runId: 'long', expectedVersion: version, state, ...META })).version;
      }]];
      const watched = storeWithWrites(file.path, between);
      const { ended, lines } = await watchOf(watched.store, 'long');
      expect(ended).toEqual({ exitCode: 0 });
      expect(lines).toEqual([
        expect.stringMatching(/^run long v51 {2}step 50 {2}write_row {2}ok: wrote row 50/),
        expect.stringMatching(/^run long v52 {2}step 51 {2}write_row {2}ok: wrote row 51/),
        'run long v53  completed after 51 steps: done',
      ]);
      // The first look reads the run; each after it, only what was written since: one record, then none.
      expect(watched.loads.map((l) => l.records)).toEqual([50, 0, 0, 1, 0, 0]);
      watched.runtime.close();
      runtime.close();
    } finally {
      file.cleanup();
    }
  });

  it('a failed try, an end and a retry written between two looks each get a line, where the run read as if it never failed', async () => {
    const file = tempDb();
    try {
      const runtime = openLocalRuntime({ dbPath: file.path });
      let state = newState('quick');
      let version = (await runtime.store.create(state, META)).version;
      const write = async (next: RunState, appended?: StepRecord) => {
        state = next;
        version = (await runtime.store.commit({ runId: 'quick', expectedVersion: version, state, ...(appended ? { appended } : {}), ...META })).version;
      };
      const step = () => { const record = recordFor('quick', state.step + 1); return write(completeStep(state, record, 4_000 + state.step), record); };
      const fail = () => write(recordFailure(state, new Error(`refused at step ${state.step + 1}`), 5_000));
      await step();
      const between: Write[][] = [[], [fail, fail, step], [fail, fail, fail, () => write(retryState(state, { now: 6_000 })), step, () => write(complete(state, 'done', undefined, 9_000))]];
      const watched = storeWithWrites(file.path, between);
      const { ended, lines } = await watchOf(watched.store, 'quick');
      watched.runtime.close();
      runtime.close();
      expect(ended).toEqual({ exitCode: 0 });
      expect(lines).toEqual([
        expect.stringMatching(/^run quick v2 {2}step 1 {2}write_row {2}ok: /),
        'run quick v3  step 2 attempt 1 failed (between two looks of this watch: the worker\'s log line has its error)',
        'run quick v4  step 2 attempt 2 failed (between two looks of this watch: the worker\'s log line has its error)',
        expect.stringMatching(/^run quick v5 {2}step 2 {2}write_row {2}ok: /),
        'run quick v6  step 3 attempt 1 failed (between two looks of this watch: the worker\'s log line has its error)',
        'run quick v7  step 3 attempt 2 failed (between two looks of this watch: the worker\'s log line has its error)',
        'run quick v8  failed at step 3 (retried before this watch looked)',
        'run quick v9  retried at step 3',
        expect.stringMatching(/^run quick v10 {2}step 3 {2}write_row {2}ok: /),
        'run quick v11  completed after 3 steps: done',
      ]);
    } finally {
      file.cleanup();
    }
  });
});
