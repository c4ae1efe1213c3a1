import { InvalidInputError, UnknownRunError } from '../../core/errors.ts';
import type { HeldSteps } from '../../core/codec.ts';
import { isTerminal, type RunState } from '../../core/state.ts';
import { resumeLoad } from '../../engine/step-cache.ts';
import type { CheckpointStore } from '../../ports.ts';
import { openBackend, type CliOptions } from '../context.ts';
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
  const stop = new AbortController();
  const offSignals = onStopSignals(() => stop.abort());
  try {
    const watched = await watchRun(runtime.store, runId, { pollMs: POLL_MS[runtime.kind], signal: stop.signal, out });
    if ('exitCode' in watched) return watched.exitCode;
    out(`stopped watching run ${runId} at version ${watched.version}${watched.waiting ? ' (waiting)' : ''}: the run goes on`);
    return 130;
  } finally {
    offSignals();
    runtime.close();
  }
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
  let seen = 0;
  let seenStep = 0;
  let waitedAt: number | undefined;
  let held: HeldSteps | undefined;
  for (;;) {
    let stored = await store.load(runId, resumeLoad(held));
    if (!stored) throw new UnknownRunError(runId);
    if (stored.version > seen) {
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
        // A run this code cannot read still has its status column: said, and watched no further.
        out(`run ${runId} v${stored.version}  ${stored.status}${stored.reason ? ` (${stored.reason})` : ''}: this code cannot read it: ${(error as Error).message}`);
        return { exitCode: isTerminal(stored.status) && stored.status === 'completed' ? 0 : 3 };
      }
      held = { from: state.stepsFrom ?? 0, steps: state.steps, condensed: state.condensed ?? [] };
      for (const line of await linesSince(store, state, stored.version, seen, seenStep)) out(line);
      seen = stored.version;
      seenStep = state.step;
      // A wait's own line once, however many looks it lasts; its answer is the next step's line.
      if (state.status === 'waiting') waitedAt = stored.version;
    }
    if (isTerminal(stored.status)) return { exitCode: stored.status === 'completed' ? 0 : 3 };
    if (signal.aborted) return { version: seen, waiting: waitedAt === seen };
    await sleep(options.pollMs, signal);
    if (signal.aborted) return { version: seen, waiting: waitedAt === seen };
  }
}

/**
 * The lines of the checkpoints after version `seen` (whose run had completed `seenStep` steps): each that
 * recorded a step, by its record; the newest also as `run` says it when it is more than a step (a failed
 * try, a wait, the end). The first look shows the run as it stands.
 */
async function linesSince(store: CheckpointStore, state: RunState, version: number, seen: number, seenStep: number): Promise<string[]> {
  if (seen === 0) {
    const [newest] = await store.history(state.runId, { before: version + 1, limit: 1 });
    return [stateLine(state, version, newest?.bytes ?? 0) ?? `run ${state.runId} v${version}  ${state.status} at step ${state.step}`];
  }
  const infos = await store.history(state.runId, { before: version + 1, limit: Math.min(version - seen, LINES_AT_ONCE) });
  const lines: string[] = [];
  const skipped = version - seen - infos.length;
  if (skipped > 0) lines.push(`run ${state.runId}  ${skipped} checkpoint${skipped === 1 ? '' : 's'} since v${seen} not shown (stepwise history ${state.runId} lists them)`);
  const records = new Map(state.steps.map((record) => [record.step, record]));
  let lastStep = skipped > 0 && infos[0] ? infos[0].step - 1 : seenStep;
  for (const info of infos) {
    const record = info.step > lastStep ? records.get(info.step) : undefined;
    lastStep = Math.max(lastStep, info.step);
    if (record) lines.push(recordLine(`run ${state.runId} v${info.version}`, record, info.bytes));
    // The newest, when it is more than a step's record: a failed try, a wait, the end.
    if (info.version === version && (state.status !== 'running' || state.failures)) {
      const line = stateLine(state, version, info.bytes);
      if (line) lines.push(line);
    }
  }
  return lines;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}
