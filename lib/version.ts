import { readFileSync } from 'node:fs';
import { CODE_VERSION_ENV } from './settings.ts';

/**
 * The code version recorded in every checkpoint, so a run can be traced to the code that wrote each step.
 * STEPWISE_CODE_VERSION (a git sha, a deploy id) wins over the package version.
 */
export const CODE_VERSION: string = process.env[CODE_VERSION_ENV]
  ?? (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
