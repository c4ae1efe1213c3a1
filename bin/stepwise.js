#!/usr/bin/env node
import { existsSync } from 'node:fs';
import { register } from 'node:module';

// The AWS SDK warns on Node 20 about SDK releases after early 2027, which this project pins itself out
// of; the warning would break the promise that stderr carries only JSON log lines and one-line errors.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

// Started in a directory that was deleted (a shell left in a release directory a deploy removed), Node's
// module.register() below (and the built CLI's, for a TypeScript agent) waited forever on its loader
// thread, which cannot resolve the directory: `stepwise status` hung with no word. Said and stopped here.
try {
  process.cwd();
} catch (error) {
  process.stderr.write(`stepwise: the current directory no longer exists (${error.code ?? error.message}): cd to one that does and run the command again\n`);
  process.exit(2);
}

// In a checkout the TypeScript sources are next to this file: run them through tsx, so an edit never runs
// against a stale build, and let `import 'stepwise'` (an agent's) resolve to the sources too (the
// "stepwise-source" condition of package.json's exports). An installed package has only the compiled
// dist/: it runs without a loader, and registers tsx only to load an agent written in TypeScript.
const sources = new URL('../lib/cli/main.ts', import.meta.url);
let cli;
if (existsSync(sources)) {
  register(`data:text/javascript,${encodeURIComponent(
    'export const resolve = (specifier, context, next) => next(specifier, { ...context, conditions: [...context.conditions, "stepwise-source"] });',
  )}`);
  // Both of tsx's hooks, as the built CLI registers them for a TypeScript agent (lib/cli/context.ts): an
  // agent outside an ES module package is CommonJS, which the ESM hook alone would require as an ES module.
  const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
  esm.register();
  cjs.register();
  cli = await import(sources.href);
} else {
  cli = await import('../dist/lib/cli/main.js');
}
await cli.runCli();
