/**
 * An agent whose one tool never returns, held to HANG_TIMEOUT_MS: `stepwise run` and `worker` on it must
 * end its run as failed, with the reason, where a tool that never settled held the process for good.
 */
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import type { Model, ModelReply } from '../../lib/ports.ts';

class AlwaysHang implements Model {
  readonly name = 'hang';
  async decide(): Promise<ModelReply> {
    return { kind: 'tool', tool: 'hang', input: {} };
  }
}

export default defineAgent({
  name: 'hang',
  offlineModel: () => new AlwaysHang(),
  tools: [tool({
    name: 'hang', description: 'Waits for an answer that never comes.', input: z.object({}), sideEffect: false,
    timeoutMs: Number(process.env.HANG_TIMEOUT_MS ?? 300),
    run: () => new Promise(() => {}),
  })],
});
