/**
 * Counting a process's fsyncs with strace's summary (`strace -f -c`), for bench/fsync-count.ts: the
 * kernel's own count of what a durable step asks of the disk, which no timing on a noisy machine gives.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** The calls that wait for the disk: SQLite at synchronous=FULL makes one of them per commit. */
export const SYNC_CALLS = ['fsync', 'fdatasync', 'sync_file_range'] as const;

/**
 * strace's options for counting the sync calls of `command` and every thread and process it starts into
 * a summary at `summaryPath`. --seccomp-bpf stops the traced process only at those calls (strace 5.3 on):
 * a LangGraph run makes millions of others.
 */
const straceArgs = (summaryPath: string, command: readonly string[]) =>
  ['-f', '--seccomp-bpf', '-c', '-o', summaryPath, '-e', `trace=${SYNC_CALLS.join(',')}`, ...command];

/** Why strace cannot count here (not installed, or not allowed to trace), or undefined when it can. */
export function cannotTrace(): string | undefined {
  const r = spawnSync('strace', straceArgs('/dev/null', ['true']), { encoding: 'utf8' });
  if (r.error) return `strace not found (${(r.error as NodeJS.ErrnoException).code ?? r.error.message}; apt-get install strace)`;
  if (r.status !== 0) return `strace cannot trace here: ${(r.stderr || `exit ${r.status}`).trim().split('\n')[0]}`;
  return undefined;
}

/**
 * Runs `command` under strace and returns its sync calls, summed over its threads and child processes;
 * throws if it fails. `summaryPath`: where strace writes its summary.
 */
export function countSyncCalls(command: readonly string[], summaryPath: string): number {
  const r = spawnSync('strace', straceArgs(summaryPath, command), { stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.error || r.status !== 0) throw new Error(`${command.join(' ')} under strace: ${r.error?.message ?? `exited ${r.status ?? r.signal}`}`);
  return syncCalls(readFileSync(summaryPath, 'utf8'));
}

/**
 * The sync calls in a `strace -c` summary: the sum of their "calls" column. A row is
 * `% time, seconds, usecs/call, calls, [errors,] syscall`; errors count as calls (they waited too).
 */
export function syncCalls(summary: string): number {
  let total = 0;
  for (const line of summary.split('\n')) {
    const fields = line.trim().split(/\s+/);
    const name = fields[fields.length - 1];
    if (fields.length < 5 || !(SYNC_CALLS as readonly string[]).includes(name!)) continue;
    const calls = Number(fields[3]);
    if (!Number.isInteger(calls)) throw new Error(`strace summary: no call count in "${line.trim()}"`);
    total += calls;
  }
  return total;
}
