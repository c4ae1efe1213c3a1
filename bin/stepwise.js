#!/usr/bin/env node
// Registers tsx so the CLI and user agent modules written in TypeScript load without a build step.
import { register } from 'tsx/esm/api';

register();
const { runCli } = await import('../lib/cli/main.ts');
await runCli();
