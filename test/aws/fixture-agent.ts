import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';

/** The agent module functions/worker.ts loads through STEPWISE_AGENT in the entry-point tests. */
export default defineAgent({
  name: 'fixture-echo',
  offlineModel: () => ({
    name: 'fixture-scripted',
    decide: async (request) => (request.step <= 2
      ? { kind: 'tool', tool: 'echo', input: { text: `echo ${request.step}` } }
      : { kind: 'done', summary: 'echoed twice' }),
  }),
  tools: [tool({
    name: 'echo', description: 'Echoes text.', sideEffect: false,
    input: z.object({ text: z.string() }), run: ({ text }) => text,
  })],
});
