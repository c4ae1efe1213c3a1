import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PRELOAD = fileURLToPath(new URL('./import-trace.mjs', import.meta.url));

export interface TracedRun { code: number | null; out: string; err: string; urls: string[]; packages: Set<string> }

/**
 * Runs `node <script> ...args` and returns the packages it imported (names as in node_modules, the scope
 * included), seen by a resolve hook: what a command loads, not how long it took.
 */
export function tracedRun(script: string, args: string[], options: { cwd: string; env?: Record<string, string | undefined> }): TracedRun {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-trace-'));
  const trace = join(dir, 'imports.txt');
  try {
    const r = spawnSync(process.execPath, ['--import', PRELOAD, script, ...args], {
      cwd: options.cwd, encoding: 'utf8', timeout: 120_000,
      env: { ...process.env, ...options.env, STEPWISE_IMPORT_TRACE: trace },
    });
    let urls: string[] = [];
    try { urls = readFileSync(trace, 'utf8').trim().split('\n').filter(Boolean); } catch { /* nothing resolved */ }
    return { code: r.status, out: r.stdout, err: r.stderr, urls, packages: packagesOf(urls) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `file:///x/node_modules/@aws-sdk/client-s3/dist/index.js` -> `@aws-sdk/client-s3`, the innermost package. */
export function packagesOf(urls: string[]): Set<string> {
  const names = new Set<string>();
  for (const url of urls) {
    const match = /.*\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
    if (match) names.add(match[1]!);
  }
  return names;
}

/** The packages of `loaded` that any of `patterns` (a name, or a scope like `@aws-sdk/`) matches. */
export function matching(loaded: Set<string>, patterns: string[]): string[] {
  return [...loaded].filter((name) => patterns.some((p) => (p.endsWith('/') ? name.startsWith(p) : name === p))).sort();
}
