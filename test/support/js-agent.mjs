// A plain JavaScript agent module, to show `--agent` takes .js as well as .ts.
import { z } from 'zod';
import { defineAgent, tool } from 'stepwise';

export const agent = defineAgent({
  name: 'js-echo',
  offlineModel: () => ({
    name: 'js-scripted',
    decide: async (request) => (request.step === 1
      ? { kind: 'tool', tool: 'echo', input: { text: 'hello from js' } }
      : { kind: 'done', summary: 'echoed once' }),
  }),
  tools: [tool({ name: 'echo', description: 'Echo text.', input: z.object({ text: z.string() }), sideEffect: false, run: ({ text }) => text })],
});
