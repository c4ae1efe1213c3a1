import { constants } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HeldSteps } from '../../core/codec.ts';
import { InvalidInputError, UnknownRunError } from '../../core/errors.ts';
import { isTerminal, type RunState, type RunStatus } from '../../core/state.ts';
import { resumeLoad } from '../../engine/step-cache.ts';
import { readCopyOf } from '../../local/read-copy.ts';
import type { CheckpointStore } from '../../ports.ts';
import { dbPath, openBackend, type CliOptions } from '../context.ts';
import { recordLine, stateLine } from '../progress.ts';
import { onStopSignals } from '../stop-signals.ts';

/**
 * How often the store is read. Locally a read of one row; on AWS one GetItem (a read unit every 2 s, on
 * demand about $0.16 a month of watching).
 */
const POLL_MS = { local: 250, aws: 2000 } as const;
/** The most checkpoints one look prints by line: a run that raced ahead is summed up beyond them. */
const LINES_AT_ONCE = 200;

/**
 * `watch <runId>`: the run's checkpoints as whichever workers write them, one line each as `run` prints
 * its own, until the run ends: exit 0 when it completed, 3 when it ended otherwise, as `run`. Through its
 * waits (a person's answer may take days; `timeout 600 stepwise watch r` bounds it). Only reads: on AWS,
 * where the workers are Lambda functions, the way to follow a run started with `start`.
 */
export async function watchCommand(runId: string | undefined, options: CliOptions, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise watch <runId>');
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    refuseFrozenCopy(runtime, runId, options);
  } catch (error) {
    runtime.close();
    throw error;
  }
  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals = 'SIGINT';
  const offSignals = onStopSignals((signal) => { stoppedBy = signal; stop.abort(); });
  try {
    const watched = await watchRun(runtime.store, runId, { pollMs: POLL_MS[runtime.kind], signal: stop.signal, out });
    if ('exitCode' in watched) return watched.exitCode;
    out(`stopped watching run ${runId} at version ${watched.version}${watched.waiting ? ' (waiting)' : ''}: the run goes on`);
    // As the signal would have ended it: 130 for Ctrl-C, 143 for the SIGTERM of `timeout` or a supervisor.
    return 128 + (constants.signals[stoppedBy] ?? 0);
  } finally {
    offSignals();
    runtime.close();
  }
}

/**
 * A SQLite file of an older layout (its release's workers still on it, mid-deploy) is read from a copy in
 * memory, taken once as the command opens it (openDatabaseToRead): a run still moving never moved in it, and
 * watch printed its first line, then nothing, until stopped ("the run goes on", though it had ended). An
 * ended run is watched from the copy as from the file; a moving one is refused, saying with what to watch it.
 */
function refuseFrozenCopy(runtime: Awaited<ReturnType<typeof openBackend>>, runId: string, options: CliOptions): void {
  const copy = runtime.local ? readCopyOf(runtime.local.db) : undefined;
  if (!copy) return;
  const status = (runtime.local!.db.prepare('SELECT status FROM runs WHERE run_id = ?').get(runId) as { status: RunStatus } | undefined)?.status;
  if (status === undefined || isTerminal(status)) return;
  // No worker has the file open (its -wal would be beside it), and none could write it from here.
  if (copy === 'unwritable-directory') throw new InvalidInputError(`run ${runId} is ${status} in ${dbPath(options)}, a file in a directory this user may not write, which this command reads from a copy taken once, in which it would never move: watch it as a user who may write that directory, or where a worker works it`);
  throw new InvalidInputError(`run ${runId} is ${status} in ${dbPath(options)}, a file of an older layout that this release reads from a copy taken once, in which it would never move (the older release's workers are still on it): watch it with that release, or once a worker of this release has brought the file to this layout`);
}

/**
 * Follows a run in `store` until it ends (`exitCode` 0 completed, 3 otherwise) or `signal` aborts (where
 * it was). A look reads the run's head and the step records written since the last look, never the
 * records it holds: on DynamoDB a GetItem when nothing moved, where reading every record was a Query of
 * the whole run (tens of read units a look at 600 steps, and an S3 GET for each record kept there).
 */
export async function watchRun(
  store: CheckpointStore, runId: string, options: { pollMs: number; signal: AbortSignal; out: (line: string) => void },
): Promise<{ exitCode: number } | { version: number; waiting: boolean }> {
  const { decodeState } = await import('../../core/codec.ts');
  const { signal, out } = options;
  let seen: Seen | undefined;
  let held: HeldSteps | undefined;
  for (;;) {
    let stored = await store.load(runId, resumeLoad(held));
    if (!stored) throw new UnknownRunError(runId);
    // Lines for a version not seen: a wait's own line once, however many looks it lasts.
    if (stored.version > (seen?.version ?? 0)) {
      let state: RunState;
      try {
        try {
          state = decodeState(stored, held);
        } catch (error) {
          if (!held) throw error;
          // Judged on a whole read, never on what this watch holds.
          held = undefined;
          stored = (await store.load(runId))!;
          state = decodeState(stored);
        }
      } catch (error) {
        // A run this code cannot read still has its status column: said, and watched no further. Ended, its
        // status's exit code; still moving, 2: newer code watches it (3 would say it ended).
        out(`run ${runId} v${stored.version}  ${stored.status}${stored.reason ? ` (${stored.reason})` : ''}: this code cannot read it: ${(error as Error).message}`);
        return { exitCode: !isTerminal(stored.status) ? 2 : stored.status === 'completed' ? 0 : 3 };
      }
      held = { from: state.stepsFrom ?? 0, steps: state.steps, condensed: state.condensed ?? [], createdAt: state.createdAt };
      for (const line of await linesSince(store, state, stored.version, seen)) out(line);
      seen = { version: stored.version, step: state.step, status: state.status, failures: state.failures };
    }
    if (isTerminal(stored.status)) return { exitCode: stored.status === 'completed' ? 0 : 3 };
    // Cut short by the signal: its AbortError is the stop, said below.
    if (!signal.aborted) await sleep(options.pollMs, undefined, { signal }).catch(() => undefined);
    if (signal.aborted) return { version: seen!.version, waiting: seen!.status === 'waiting' };
  }
}

/** What the last look showed of the run. */
interface Seen { version: number; step: number; status: RunStatus; failures: number }

/**
 * The lines of the checkpoints after the last look (`seen`): each that recorded a step, by its record;
 * the newest also as `run` says it when it is more than a step (a failed try, a wait, the end); and each
 * other one written between two looks by what its history row says (a try that failed, a wait answered
 * since, an end retried since), where it was left out and the run read as if it had never failed. The
 * first look shows the run as it stands.
 */
async function linesSince(store: CheckpointStore, state: RunState, version: number, seen: Seen | undefined): Promise<string[]> {
  if (!seen) {
    const [newest] = await store.history(state.runId, { before: version + 1, limit: 1 });
    return [asItStands(state, version, newest?.bytes ?? 0)];
  }
  const shown = Math.min(version - seen.version, LINES_AT_ONCE);
  // One row more than the lines: the checkpoint before the first shown, which that one is told from.
  const page = await store.history(state.runId, { before: version + 1, limit: shown + 1 });
  const infos = page.filter((info) => info.version > seen.version).slice(-shown);
  const first = infos[0];
  if (!first) return [asItStands(state, version, 0)];
  const before: { step: number; status: RunStatus; failures?: number } = first.version === seen.version + 1 ? seen
    : page.find((info) => info.version === first.version - 1) ?? { step: first.step - 1, status: 'running' };
  const lines: string[] = [];
  const skipped = version - seen.version - infos.length;
  if (skipped > 0) lines.push(`run ${state.runId}  ${skipped} checkpoint${skipped === 1 ? '' : 's'} since v${seen.version} not shown (stepwise history ${state.runId} lists them)`);
  const records = new Map(state.steps.map((record) => [record.step, record]));
  let lastStep = before.step;
  let lastStatus = before.status;
  // Failed tries of the step in hand, when known: the last look's count, or none after a step's record.
  let failures = before.failures;
  for (const info of infos) {
    const where = `run ${state.runId} v${info.version}`;
    const record = info.step > lastStep ? records.get(info.step) : undefined;
    if (record) {
      lines.push(recordLine(where, record, info.bytes));
      failures = 0;
    } else if (info.version !== version && info.step === lastStep) {
      // Passed between two looks: the history row has its status, not the error or the wait it held.
      if (info.status === 'running' && isTerminal(lastStatus)) {
        lines.push(`${where}  retried at step ${info.step + 1}`);
        failures = 0;
      } else if (info.status === 'running') {
        failures = failures === undefined ? undefined : failures + 1;
        lines.push(`${where}  step ${info.step + 1} attempt${failures ? ` ${failures}` : ''} failed (between two looks of this watch: the worker's log line has its error)`);
      } else if (info.status === 'waiting') {
        lines.push(`${where}  step ${info.step + 1}  waiting (answered before this watch looked)`);
      } else {
        lines.push(`${where}  ${info.status} at step ${info.step + 1} (retried before this watch looked)`);
      }
    }
    lastStep = Math.max(lastStep, info.step);
    lastStatus = info.status;
    // The newest, when it is more than a step's record: a failed try, a wait, the end.
    if (info.version === version && (state.status !== 'running' || state.failures)) {
      const line = stateLine(state, version, info.bytes);
      if (line) lines.push(line);
    }
  }
  return lines;
}

/** The run as it stands: `run`'s line of it, or its status and step when that has none (no step yet). */
function asItStands(state: RunState, version: number, bytes: number): string {
  return stateLine(state, version, bytes) ?? `run ${state.runId} v${version}  ${state.status} at step ${state.step}`;
}
