import { existsSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/**
 * Makes a directory and its missing parents, one level at a time, and fails with the first level that
 * cannot be made. Not `mkdirSync(dir, { recursive: true })`: Node's recursive mkdir takes ENOENT to mean
 * "the parent is missing", makes the parent (EEXIST: fine) and tries again, forever, where the parent
 * exists and the child still cannot be made (a path under /proc or /sys, a stale mount): a synchronous loop
 * at 100% CPU that not even SIGTERM's handler can interrupt. Here every level is tried once.
 */
export function makeDir(dir: string): void {
  const missing: string[] = [];
  for (let at = resolve(dir); !existsSync(at); at = dirname(at)) {
    missing.push(at);
    if (dirname(at) === at) break;
  }
  for (const level of missing.reverse()) {
    try {
      mkdirSync(level);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // EEXIST: another process made it meanwhile, or a symlink stands there (its target decides next).
      if (code === 'EEXIST') continue;
      throw new Error(`cannot make the directory ${level} (${code ?? (error as Error).message})`, { cause: error });
    }
  }
}
