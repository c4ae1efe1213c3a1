import type { Logger } from '../log.ts';

let cause: string | undefined;

/**
 * Ends the process for a reason of the CLI's own (its stdout's reader gone): a step in hand is then said to
 * be cut off for that reason, where the line blamed a tool's process.exit.
 */
export function exitBecause(why: string, code: number): never {
  cause = why;
  process.exit(code);
}

/**
 * Until the returned function is called, this process ending while `inHand()` names runs (a tool that
 * calls process.exit, throws from a timer or leaves a rejection unhandled; a second stop signal) is said
 * in an error line naming them, and an exit code of 0 becomes 1. A tool's process.exit(0) ended `worker`
 * with code 0 and not a line, which a supervisor that restarts a failed worker took for a clean stop, and
 * `stepwise run` with 0, which says the run completed.
 */
export function onExitInStep(
  log: Logger, fields: Record<string, unknown>, inHand: () => string[], say: (code: number, runs: string, cause: string | undefined) => string,
): () => void {
  const onExit = (code: number) => {
    const runs = inHand();
    if (!runs.length) return;
    // The logger writes synchronously (lib/log.ts): the line is out before the process is.
    log.error({ event: 'exited-in-step', ...fields, code, runs }, say(code, runs.join(', '), cause));
    if (code === 0) process.exitCode = 1;
  };
  process.on('exit', onExit);
  return () => { process.off('exit', onExit); };
}
