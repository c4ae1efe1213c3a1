import { spawn, spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const BIN = join(ROOT, 'bin/stepwise.js');

export interface CliResult { code: number | null; out: string; err: string }

/** Root writes any file whatever its mode: as root, a command meeting a file it may not write runs as nobody. */
export const NOBODY = 65534;
export const asRoot = process.getuid?.() === 0;

/**
 * The stepwise command run to its end, synchronously; `asNobody`, as nobody when the tests run as root
 * (the tests of files and directories a user may not write).
 */
export function stepwiseSync(args: string[], env: Record<string, string | undefined>, options: { asNobody?: boolean } = {}): CliResult {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...env },
    ...(options.asNobody && asRoot ? { uid: NOBODY, gid: NOBODY } : {}),
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/**
 * The stepwise command as a user runs it, in a child process. Asynchronous, so servers living in the
 * test process (the local Messages API) keep answering while it runs.
 */
export function stepwiseCli(args: string[], env: Record<string, string | undefined>, cwd = ROOT): Promise<CliResult> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, ...env } });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => { out += d; });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  return new Promise((done) => child.on('exit', (code) => done({ code, out, err })));
}

/**
 * The stepwise command started in a child process, with `firstLine` resolved at its first line of stdout:
 * a test waits for a command to have looked (`watch`'s first look) before it moves on, instead of a sleep.
 */
export function startCli(args: string[], env: Record<string, string | undefined>, cwd = ROOT): { firstLine: Promise<string>; done: Promise<CliResult> } {
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, ...env } });
  let out = '';
  let err = '';
  let seen: (line: string) => void = () => {};
  const firstLine = new Promise<string>((resolve) => { seen = resolve; });
  child.stdout.on('data', (d: Buffer) => {
    out += d;
    if (out.includes('\n')) seen(out.slice(0, out.indexOf('\n')));
  });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  const done = new Promise<CliResult>((resolve) => child.on('exit', (code) => {
    seen(out);
    resolve({ code, out, err });
  }));
  return { firstLine, done };
}
