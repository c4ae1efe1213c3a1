import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** What the construct knows of the agent it deploys. */
export interface AgentDescription {
  name: string;
  /** Which export of the module is the agent. */
  exportName: 'default' | 'agent';
  formerNames: string[];
  /** The agent's `startOn` triggers, as EventBridge matches them. */
  startOn: { source?: string; detailType?: string }[];
}

const SCRIPT = fileURLToPath(new URL('./describe-agent.mjs', import.meta.url));
const MARK = 'STEPWISE_AGENT_DESCRIPTION ';
const ERROR_MARK = 'STEPWISE_AGENT_ERROR ';
const cache = new Map<string, AgentDescription>();

/**
 * Loads the agent module in a child Node process (a construct is built synchronously; a TypeScript agent
 * needs tsx) and returns its name and triggers. Remembered per file and modification time, so one synth
 * with several stacks of the same agent loads it once.
 */
export function describeAgent(agentPath: string): AgentDescription {
  const path = resolve(agentPath);
  let mtime: number;
  try {
    mtime = statSync(path).mtimeMs;
  } catch {
    throw new Error(`stepwise: the agent module ${agentPath} does not exist (resolved to ${path})`);
  }
  const key = `${path}@${mtime}`;
  const known = cache.get(key);
  if (known) return known;
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  let out: string;
  try {
    out = execFileSync(process.execPath, ['--import', tsx, SCRIPT, path], {
      encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    });
  } catch (error) {
    const stderr = String((error as { stderr?: unknown }).stderr ?? '').trim();
    // describe-agent.mjs marks why; anything else (Node itself failing) is stderr's last lines.
    const said = stderr.split('\n').reverse().find((l) => l.startsWith(ERROR_MARK))?.slice(ERROR_MARK.length);
    throw new Error(`stepwise: cannot load the agent module ${agentPath}: ${said ?? (stderr.split('\n').slice(-5).join(' ') || (error as Error).message)}`);
  }
  const line = out.split('\n').reverse().find((l) => l.startsWith(MARK));
  if (!line) throw new Error(`stepwise: the agent module ${agentPath} printed no description`);
  const description = JSON.parse(line.slice(MARK.length)) as AgentDescription;
  cache.set(key, description);
  return description;
}
