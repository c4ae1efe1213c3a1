import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const BIN = join(ROOT, 'bin/stepwise.js');

export interface CliResult { code: number | null; out: string; err: string }

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
