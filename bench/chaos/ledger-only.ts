/**
 * The process schedules' ledger-only effects (process-agent.ts): effects that store no key of their own and
 * count every application, so a second one is seen. The ledger keeps such an effect once except where no
 * ledger can: its holder acted, then was killed, frozen or cut off from the store before it could put the
 * result on record, and the next try cannot know the effect happened (README, on keys stored with the
 * effect). Those second applications are explained by the fault the schedule put there; any other is the
 * ledger's.
 */

/**
 * A fault at real time `at` for `ms`: on one worker (`pid`: SIGKILL, SIGSTOP), or on every worker (a
 * brownout of the store, or a worker stopped on a SQLite file, whose write lock it may hold).
 */
export interface Fault {
  pid?: number;
  at: number;
  ms: number;
}

/** One application of a ledger-only effect, by worker `pid` at real time `at`. */
export interface Application {
  key: string;
  pid: number;
  at: number;
}

/** How long after a ledger-only effect acted its holder may not yet have its result on record (it puts it there in ms, unfaulted). */
export const RECORD_WITHIN_MS = 5_000;

/**
 * For each key applied more than once: how many times, not counting second applications a fault
 * explains (one on the holder of the application before, or a brownout, starting while that holder may
 * not yet have recorded it). `explained` counts those left out.
 */
export function applicationsUnexplained(applications: readonly Application[], faults: readonly Fault[]): { times: Map<string, number>; explained: number } {
  const byKey = new Map<string, Application[]>();
  for (const a of applications) byKey.set(a.key, [...(byKey.get(a.key) ?? []), a]);
  const times = new Map<string, number>();
  let explained = 0;
  for (const [key, list] of byKey) {
    const sorted = [...list].sort((x, y) => x.at - y.at);
    let counted = 1;
    for (let i = 1; i < sorted.length; i++) {
      const before = sorted[i - 1]!;
      const cut = faults.some((f) => (f.pid === undefined || f.pid === before.pid) && f.at + f.ms >= before.at && f.at <= before.at + RECORD_WITHIN_MS);
      if (cut) explained++;
      else counted++;
    }
    times.set(key, counted);
  }
  return { times, explained };
}
