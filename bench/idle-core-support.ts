/**
 * bench/idle-core.ts's means: an idle-priority spinner on a core, and a process's main thread pinned to it.
 * Linux only, with taskset and chrt (util-linux).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Set by bench/idle-core.ts: the core whose spinner a bench case's main thread runs beside. */
export const MAIN_THREAD_CORE_ENV = 'BENCH_MAIN_THREAD_CORE';

/** Why this machine cannot pin and spin, or undefined when it can. */
export function cannotPin(): string | undefined {
  if (process.platform !== 'linux') return `needs Linux (this is ${process.platform})`;
  // SCHED_IDLE needs no privilege: a process may always lower its own priority.
  const tried = spawnSync('taskset', ['-c', '0', 'chrt', '-i', '0', 'true']);
  if (tried.error || tried.status !== 0) return `needs taskset and chrt (util-linux) able to pin a process and give it SCHED_IDLE: ${tried.error?.message ?? tried.stderr.toString().trim()}`;
  return undefined;
}

/**
 * A busy loop on `core` at SCHED_IDLE, until killed: it runs only when nothing else on that core can.
 * It also ends when the process that started it is gone (taskset and chrt exec it, so that is its parent):
 * a spinner left behind by a bench killed mid-run would make every later reading faster. The parent's id
 * is given to it, not read when it starts: a bench killed before then would leave it a parent of 1. It
 * looks every 1e6 turns (about a millisecond of its own time, one getppid): at SCHED_IDLE on a busy core
 * it gets well under 1% of it, and at 1e7 a test waiting 5 s for it to end saw it still there, in CI.
 */
const SPIN = 'for (;;) { for (let i = 0; i < 1e6; i++); if (process.ppid !== Number(process.argv[1])) process.exit(0); }';

export function idleSpinner(core: string): ChildProcess {
  return spawn('taskset', ['-c', core, 'chrt', '-i', '0', process.execPath, '-e', SPIN, String(process.pid)], { stdio: 'ignore' });
}

/**
 * Pins this process's main thread to the core named by MAIN_THREAD_CORE_ENV, if it is set. `taskset -p`
 * without `-a` sets one thread's affinity, and a process's main thread has the process's id: the threads
 * Node started already (the garbage collector's, the compiler's) keep every core, so a case with a large
 * heap is not slowed by collecting it on the one core its steps run on.
 */
export function pinMainThreadFromEnv(): void {
  const core = process.env[MAIN_THREAD_CORE_ENV];
  if (core === undefined) return;
  const r = spawnSync('taskset', ['-p', '-c', core, String(process.pid)]);
  if (r.error || r.status !== 0) throw new Error(`could not pin the main thread to core ${core}: ${r.error?.message ?? r.stderr.toString().trim()}`);
}

/** A file of sysfs, trimmed, or undefined where it is absent or unreadable. */
function sysfs(root: string, path: string): string | undefined {
  try {
    return readFileSync(`${root}/${path}`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/**
 * What this machine's cores do when they have nothing to run, as Linux reports it: the cpuidle driver and
 * governor, and, under the haltpoll driver of a KVM guest, how long an idle core polls before it halts.
 * An fsync's wait leaves the step's core idle, and a core that halts at once must be woken when the disk
 * answers (bench/idle-core.ts measures what that costs), so readings from machines that differ here are
 * not comparable. `root` is where sysfs is mounted (a test's own folder, in tests).
 */
export function idlePolicy(root = '/sys'): string {
  const driver = sysfs(root, 'devices/system/cpu/cpuidle/current_driver');
  if (!driver) return 'cpuidle not reported';
  const governor = sysfs(root, 'devices/system/cpu/cpuidle/current_governor') ?? sysfs(root, 'devices/system/cpu/cpuidle/current_governor_ro');
  const poll = driver === 'haltpoll' ? sysfs(root, 'module/haltpoll/parameters/guest_halt_poll_ns') : undefined;
  return `cpuidle driver ${driver}${governor ? `, governor ${governor}` : ''}${poll === undefined ? '' : `, ${haltPolling(poll)}`}`;
}

/** What haltpoll's guest_halt_poll_ns, as sysfs gives it, makes an idle core do. */
function haltPolling(ns: string): string {
  if (!/^\d+$/.test(ns)) return `guest_halt_poll_ns unreadable (${JSON.stringify(ns)})`;
  if (ns === '0') return "guest_halt_poll_ns 0: an idle core halts at once (the kernel's default polls up to 200,000 ns first)";
  return `guest_halt_poll_ns ${Number(ns).toLocaleString('en-US')}: an idle core polls that long before it halts`;
}
