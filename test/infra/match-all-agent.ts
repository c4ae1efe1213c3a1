import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';

/** A trigger with neither a source nor a detail type: no EventBridge rule may match every event. */
export default defineAgent({
  name: 'matches-everything',
  startOn: [{ goal: () => 'anything' }],
  tools: [tool({ name: 'noop', description: 'Does nothing.', input: z.object({}), sideEffect: false, run: () => 'ok' })],
});
