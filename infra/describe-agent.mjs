// Prints what the CDK construct needs to know about an agent module at synth time: its name, former
// names and the EventBridge triggers that start its runs. Run by infra/agent-description.ts in a child
// process (with tsx, so a TypeScript agent loads), because a construct is built synchronously.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const path = process.argv[2];
let mod;
try {
  mod = await import(pathToFileURL(resolve(path)).href);
} catch (error) {
  // One marked line: left to Node, a module that throws while it loads ends stderr with stack frames, and
  // the construct, which shows stderr's last lines, would show those without the error they are under.
  process.stderr.write(`\nSTEPWISE_AGENT_ERROR ${loadError(error)}\n`);
  process.exit(2);
}
const agent = mod.agent ?? mod.default;
if (!agent || typeof agent !== 'object' || typeof agent.name !== 'string' || !Array.isArray(agent.tools)) {
  process.stderr.write(`\nSTEPWISE_AGENT_ERROR ${path} does not export an agent (export default defineAgent({...}))\n`);
  process.exit(2);
}
const description = {
  name: agent.name,
  // The export a bundle imports: the one loadAgent prefers.
  exportName: mod.agent ? 'agent' : 'default',
  formerNames: agent.formerNames ?? [],
  startOn: (agent.startOn ?? []).map((trigger) => ({
    ...(trigger.source !== undefined ? { source: trigger.source } : {}),
    ...(trigger.detailType !== undefined ? { detailType: trigger.detailType } : {}),
  })),
};
// Marked, so whatever the agent module itself prints on stdout cannot be mistaken for it.
process.stdout.write(`\nSTEPWISE_AGENT_DESCRIPTION ${JSON.stringify(description)}\n`);

/** The error in one line, with the first place in the project's own code it came from. */
function loadError(error) {
  if (!(error instanceof Error)) return String(error);
  const text = `${error.name}: ${error.message}`.split('\n').map((line) => line.trim()).filter(Boolean).join(' ');
  const frame = (error.stack ?? '').split('\n').map((line) => line.match(/\((\/[^()]+:\d+:\d+)\)$|at (\/[^()]+:\d+:\d+)$/)).find((m) => m && !/node_modules|node:/.test(m[1] ?? m[2]));
  return frame ? `${text} (at ${frame[1] ?? frame[2]})` : text;
}
