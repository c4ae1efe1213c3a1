import { constants } from 'node:os';

/**
 * SIGINT and SIGTERM for a command that stops gently (`worker`, `run`, `serve`): the first calls `stop`,
 * and a second, of either kind, ends the process at once. With `process.once` per signal, as before, the
 * second was left to the signal's default action, which the kernel never takes for PID 1 (a container
 * without an init): there, and after a supervisor's SIGTERM then a Ctrl-C, it did nothing, and "again
 * stops it at once" was not so. Exits as the signal would have ended it (128 + its number: 130, 143).
 * Returns what removes the handlers.
 */
export function onStopSignals(stop: (signal: NodeJS.Signals) => void): () => void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(128 + (constants.signals[signal] ?? 0));
    stopping = true;
    stop(signal);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}
