import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { cannotPin, idlePolicy, MAIN_THREAD_CORE_ENV } from '../../bench/idle-core-support.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const SUPPORT = JSON.stringify(resolve(ROOT, 'bench/idle-core-support.ts'));

/** Why the machine cannot run these, said in the test's name when it cannot (they need Linux and util-linux). */
const why = cannotPin();

/** A field of /proc/<pid>/task/<tid>/status. */
const statusField = (pid: number, tid: string, field: string) =>
  readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8').split('\n').find((line) => line.startsWith(`${field}:`))?.split(':')[1]?.trim();

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** A Node process running `code` (an ES module, with tsx), its first line of output, and the process. */
async function startNode(code: string, env: NodeJS.ProcessEnv = process.env) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = await new Promise<string[]>((done) => createInterface({ input: child.stdout! }).once('line', (l) => done([l])));
  return { child, line: line! };
}

describe(`bench/idle-core-support.ts${why ? ` (not run here: ${why})` : ''}`, () => {
  it.skipIf(why)('spins at SCHED_IDLE on its core, and ends when the bench that started it is gone', async () => {
    const { child: bench, line } = await startNode(`import { idleSpinner } from ${SUPPORT}; console.log(idleSpinner('0').pid); setInterval(() => {}, 1000);`);
    const spinner = Number(line);
    try {
      // taskset and chrt exec it: once the program it runs is node, the policy and the core are set. Its
      // arguments name the loop from the start (taskset's own command line carries them), so the check is
      // the program, argv[0]: matching the loop's text raced chrt and read SCHED_OTHER once in CI.
      await expect.poll(() => readFileSync(`/proc/${spinner}/cmdline`, 'utf8').split('\0')[0], { timeout: 5000 }).toBe(process.execPath);
      expect(spawnSync('chrt', ['-p', String(spinner)]).stdout.toString()).toMatch(/SCHED_IDLE/);
      expect(statusField(spinner, String(spinner), 'Cpus_allowed_list')).toBe('0');
      expect(alive(spinner)).toBe(true);
      bench.kill('SIGKILL'); // no finally of its own runs: the spinner must notice by itself
      // At SCHED_IDLE it runs only when its core has nothing else: with the suite's workers on both cores
      // that can be a few seconds, so the wait is long; it ends at once when the spinner is gone.
      await expect.poll(() => alive(spinner) && !readFileSync(`/proc/${spinner}/stat`, 'utf8').includes(') Z '), { timeout: 30_000, interval: 50 }).toBe(false);
    } finally {
      if (alive(spinner)) process.kill(spinner, 'SIGKILL');
      bench.kill('SIGKILL');
    }
  });

  it.skipIf(why)("pins only the main thread when the variable is set, and nothing when it is not", async () => {
    const code = `import { pinMainThreadFromEnv } from ${SUPPORT}; pinMainThreadFromEnv(); console.log('pinned'); setInterval(() => {}, 1000);`;
    const { child: pinned } = await startNode(code, { ...process.env, [MAIN_THREAD_CORE_ENV]: '0' });
    const { child: free } = await startNode(code, { ...process.env, [MAIN_THREAD_CORE_ENV]: undefined });
    try {
      const everyCore = statusField(process.pid, String(process.pid), 'Cpus_allowed_list');
      const threads = (pid: number) => readdirSync(`/proc/${pid}/task`).map((tid) => ({ main: tid === String(pid), cores: statusField(pid, tid, 'Cpus_allowed_list') }));
      const mine = threads(pinned.pid!);
      expect(mine.find((t) => t.main)?.cores).toBe('0');
      // Node's other threads (the garbage collector's, the compiler's) started before it and keep every core.
      expect(mine.filter((t) => !t.main).length).toBeGreaterThan(0);
      for (const t of mine.filter((thread) => !thread.main)) expect(t.cores).toBe(everyCore);
      for (const t of threads(free.pid!)) expect(t.cores).toBe(everyCore);
    } finally {
      pinned.kill('SIGKILL');
      free.kill('SIGKILL');
    }
  });
});

describe('idlePolicy', () => {
  /** A folder laid out as sysfs, holding `files` (path under it: contents, with the newline sysfs ends them with). */
  function fakeSysfs(files: Record<string, string>): string {
    const root = mkdtempSync(join(tmpdir(), 'sysfs-'));
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), `${text}\n`);
    }
    return root;
  }
  const roots: string[] = [];
  const read = (files: Record<string, string>) => {
    roots.push(fakeSysfs(files));
    return idlePolicy(roots.at(-1));
  };
  afterAll(() => roots.forEach((root) => rmSync(root, { recursive: true, force: true })));
  const haltpoll = (ns: string) => ({
    'devices/system/cpu/cpuidle/current_driver': 'haltpoll',
    'devices/system/cpu/cpuidle/current_governor': 'haltpoll',
    'module/haltpoll/parameters/guest_halt_poll_ns': ns,
  });

  it('says when a KVM guest\'s idle core halts at once, and how long it polls otherwise', () => {
    expect(read(haltpoll('0'))).toBe("cpuidle driver haltpoll, governor haltpoll, guest_halt_poll_ns 0: an idle core halts at once (the kernel's default polls up to 200,000 ns first)");
    expect(read(haltpoll('200000'))).toBe('cpuidle driver haltpoll, governor haltpoll, guest_halt_poll_ns 200,000: an idle core polls that long before it halts');
    // Not a number: said as it is, not read as 0 (Number('') is 0).
    expect(read(haltpoll(''))).toBe('cpuidle driver haltpoll, governor haltpoll, guest_halt_poll_ns unreadable ("")');
  });

  it('names another driver and its governor, read-only where the kernel offers no choice, and says when there is none', () => {
    expect(read({ 'devices/system/cpu/cpuidle/current_driver': 'intel_idle', 'devices/system/cpu/cpuidle/current_governor_ro': 'menu' })).toBe('cpuidle driver intel_idle, governor menu');
    // A haltpoll parameter left from a module that is not the driver in use says nothing of this machine.
    expect(read({ 'devices/system/cpu/cpuidle/current_driver': 'acpi_idle', 'module/haltpoll/parameters/guest_halt_poll_ns': '0' })).toBe('cpuidle driver acpi_idle');
    expect(read({})).toBe('cpuidle not reported');
  });
});
