import { readFileSync } from 'node:fs';

/**
 * A reading of the machine's monotonic clock (CLOCK_MONOTONIC on Linux, which process.hrtime reads): the
 * time since the machine booted, on a clock nobody sets. NTP, `date -s` and a VM's resync step the wall
 * clock (Date.now()) but never this one, and every process on the machine reads the same one, so times
 * one process writes to a shared file another can compare with its own readings (performance.now() is
 * counted from each process's start, so it cannot). `boot` names the boot the time counts from: a reading
 * of another boot says nothing about this one.
 */
export interface MachineTime {
  boot: string;
  ms: number;
}

let boot: string | null | undefined;

/** The machine's time now, or undefined where no boot can be named (other systems than Linux). */
export function machineTime(): MachineTime | undefined {
  if (boot === undefined) boot = readBootId();
  if (boot === null) return undefined;
  return { boot, ms: Number(process.hrtime.bigint() / 1_000_000n) };
}

function readBootId(): string | null {
  if (process.platform !== 'linux') return null;
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
  } catch {
    return null;
  }
}
