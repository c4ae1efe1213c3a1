// Prints what the CDK construct needs to know about an agent module at synth time: its name, former
// names and the EventBridge triggers that start its runs. Run by infra/agent-description.ts in a child
// process (with tsx, so a TypeScript agent loads), because a construct is built synchronously.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const path = process.argv[2];
const mod = await import(pathToFileURL(resolve(path)).href);
const agent = mod.agent ?? mod.default;
if (!agent || typeof agent !== 'object' || typeof agent.name !== 'string' || !Array.isArray(agent.tools)) {
  process.stderr.write(`${path} does not export an agent (export default defineAgent({...}))\n`);
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
