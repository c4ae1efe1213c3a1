/**
 * `stepwise` as an installed package runs it, for bench worker processes started with
 * `node --import tsx --import ./bench/compiled.mjs bench/compiled-cli.mjs <command>`: the compiled CLI in
 * dist/, as bin/stepwise.js loads it where there are no sources. tsx stays for the agent file, which is
 * TypeScript; bench/compiled.mjs sends its imports of lib/ to dist/ too, so the agent and the CLI share
 * one copy of each module.
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const cli = await import('../dist/lib/cli/main.js');
await cli.runCli();
