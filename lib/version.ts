import { readFileSync } from 'node:fs';
import { CODE_VERSION_ENV } from './settings.ts';

/**
 * The code version recorded in every checkpoint, so a run can be traced to the code that wrote each step.
 * STEPWISE_CODE_VERSION (a git sha, a deploy id) wins over the package version.
 */
export const CODE_VERSION: string = process.env[CODE_VERSION_ENV] ?? packageVersion();

/**
 * The version in stepwise's own package.json, whatever STEPWISE_CODE_VERSION says (`stepwise --version`):
 * one directory up from the sources (lib/), two from the build (dist/lib/). A bundle without it (a Lambda
 * asset) says so instead of failing to load.
 */
export function packageVersion(): string {
  for (const path of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(path, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'stepwise' && pkg.version) return pkg.version;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return 'unknown (set STEPWISE_CODE_VERSION)';
}
