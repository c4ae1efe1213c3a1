import type { Logger } from '../log.ts';

/**
 * The workers on one SQLite file share the machine's clock, and the queue's and the ledger's times are
 * points on it. When it steps back (NTP, a VM restored from a snapshot, `date -s`), a time written before
 * the step is ahead of every later reading by the step: a queued message was hidden, and a dead holder's
 * claim held, for the step (an hour back, an hour with no step taken). A row says when its time was
 * written (the queue's created_at, the ledger's updated_at); one written further ahead of now than two
 * processes' readings of the clock can differ was written before a step back, and its delay or lease is
 * counted again from now: never shorter than it was meant to be (no message visible, no claim free
 * before its time), only no longer than that.
 */
export const CLOCK_STEP_TOLERANCE_MS = 1_000;

/**
 * When a process should look for such rows: at its first look, and whenever its clock went back against
 * the time the process has run (performance.now()), which is when a step back can have left them. Each
 * look at every other time would be a read of every live row at every poll.
 */
export class StepWatch {
  private last: { wall: number; mono: number } | undefined;

  due(now: number): boolean {
    const mono = performance.now();
    const last = this.last;
    const due = !last || now - last.wall < mono - last.mono - CLOCK_STEP_TOLERANCE_MS;
    // A due look is recorded by `looked`, once it was made: one that failed (the lock refused past its
    // timeout, a full disk) is due again at the next poll, not missed for good.
    if (!due) this.last = { wall: now, mono };
    return due;
  }

  /** The look `due` asked for was made. */
  looked(now: number): void {
    this.last = { wall: now, mono: performance.now() };
  }
}

/** The warning line of a step back found in the file: how far at least, and what was counted again. */
export function warnClockStep(log: Logger | undefined, stepMs: number, what: string): void {
  // Without a logger of the caller's, one made for this rare line: imported here, not at the top, so the
  // commands that only read (status, show) load no logger (test/cli/lazy-imports.test.ts).
  if (!log) {
    void import('../log.ts').then(({ createLogger }) => warnClockStep(createLogger(), stepMs, what));
    return;
  }
  log.warn(
    { event: 'clock-stepped-back', stepMs, rebased: what },
    `the system clock stepped back by at least ${Math.round(stepMs / 1000)} s: ${what} written before the step now count from now, not from then`,
  );
}
