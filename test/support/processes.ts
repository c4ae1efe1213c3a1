import { spawn, type ChildProcess } from 'node:child_process';
import { BIN, ROOT } from './cli.ts';

/** A long-running stepwise command (serve, worker) in a child process, with its output so far. */
export interface Running {
  child: ChildProcess;
  out(): string;
  err(): string;
  /** Resolves with the first stdout line matching, or rejects when the process exits first. */
  line(pattern: RegExp): Promise<string>;
  stop(): Promise<void>;
}

export function runStepwise(args: string[], env: Record<string, string | undefined>): Running {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, env: { ...process.env, ...env } });
  let out = '';
  let err = '';
  const waiters: { pattern: RegExp; resolve(line: string): void; reject(error: Error): void }[] = [];
  const check = () => {
    for (const waiter of [...waiters]) {
      const line = out.split('\n').find((l) => waiter.pattern.test(l));
      if (line !== undefined) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(line);
      }
    }
  };
  child.stdout!.on('data', (d: Buffer) => { out += d; check(); });
  child.stderr!.on('data', (d: Buffer) => { err += d; });
  const exited = new Promise<void>((resolve) => child.once('exit', () => {
    for (const waiter of waiters.splice(0)) waiter.reject(new Error(`stepwise ${args[0]} exited before printing ${waiter.pattern}:\n${out}\n${err.slice(-2000)}`));
    resolve();
  }));
  return {
    child, out: () => out, err: () => err,
    line: (pattern) => new Promise((resolve, reject) => { waiters.push({ pattern, resolve, reject }); check(); if (child.exitCode !== null) void exited.then(() => undefined); }),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
