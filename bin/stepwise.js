#!/usr/bin/env node
// Registers tsx so the CLI and user agent modules written in TypeScript load without a build step.
import { register } from 'tsx/esm/api';

// The AWS SDK warns on Node 20 about SDK releases after early 2027, which this project pins itself out
// of; the warning would break the promise that stderr carries only JSON log lines and one-line errors.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

register();
const { runCli } = await import('../lib/cli/main.ts');
await runCli();
