/**
 * An agent whose module takes until a gate file exists to load (SLOW_AGENT_GATE), after writing
 * SLOW_AGENT_LOADING: a test can signal a worker while its agent is still loading.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import type { Model, ModelReply } from '../../lib/ports.ts';

writeFileSync(process.env.SLOW_AGENT_LOADING!, String(process.pid));
while (!existsSync(process.env.SLOW_AGENT_GATE!)) await new Promise((r) => setTimeout(r, 20));

class Finish implements Model {
  readonly name = 'finish';
  async decide(): Promise<ModelReply> {
    return { kind: 'done', summary: 'done' };
  }
}

export default defineAgent({
  name: 'slow-import',
  offlineModel: () => new Finish(),
  tools: [tool({ name: 'noop', description: 'Does nothing.', input: z.object({}), sideEffect: false, run: () => 'ok' })],
});
