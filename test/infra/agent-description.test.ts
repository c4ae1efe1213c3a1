import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeAgent } from '../../infra/agent-description.ts';
import { tempDir } from '../support/temp-dirs.ts';

/** What the construct learns of an agent module at synth (infra/agent-description.ts), and what it says when it cannot. */
describe('describeAgent', () => {
  it('says why an agent module that throws while it loads cannot be deployed: its error, not the stack frames under it', () => {
    const dir = tempDir('stepwise-agent-');
    const path = join(dir, 'agent.ts');
    // An agent that reads a setting when it loads, as the example reads its approver, set only on the worker.
    writeFileSync(path, "if (!process.env.MY_APPROVER) throw new Error('MY_APPROVER is not set: give the approver');\nexport default {};\n");
    let message = '';
    try {
      describeAgent(path);
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toMatch(new RegExp(`^stepwise: cannot load the agent module ${path}: Error: MY_APPROVER is not set: give the approver \\(at ${path}:1:\\d+\\)$`));
  });

  it('says which module an agent module imports is missing', () => {
    const dir = tempDir('stepwise-agent-');
    const path = join(dir, 'agent.ts');
    writeFileSync(path, "import { tools } from './tools.ts';\nexport default { name: 'a', tools };\n");
    expect(() => describeAgent(path)).toThrow(/^stepwise: cannot load the agent module .*agent\.ts: Error: Cannot find module '\.\/tools\.ts'/);
  });
});
