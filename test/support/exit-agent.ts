/**
 * An agent whose one tool ends its process with process.exit(EXIT_CODE, default 0), as a library's or a
 * mistaken tool's does: `stepwise worker` and `run` must say which run it left in the middle of a step,
 * and not exit 0.
 */
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import type { Model, ModelReply } from '../../lib/ports.ts';

class AlwaysExit implements Model {
  readonly name = 'exit';
  async decide(): Promise<ModelReply> {
    return { kind: 'tool', tool: 'leave', input: {} };
  }
}

export default defineAgent({
  name: 'exit',
  offlineModel: () => new AlwaysExit(),
  tools: [tool({
    name: 'leave', description: 'Ends its process.', input: z.object({}), sideEffect: true,
    run: () => process.exit(Number(process.env.EXIT_CODE ?? 0)),
  })],
});
