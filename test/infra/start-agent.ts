import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';

/** An agent whose runs start from EventBridge events, exported by name (not as the default export). */
export const agent = defineAgent({
  name: 'starts-on-events',
  startOn: [
    { source: 'aws.s3', detailType: 'Object Created', goal: (event) => `Process ${JSON.stringify(event.detail)}` },
    { detailType: 'invoice.received', goal: () => 'Check the invoice' },
  ],
  tools: [tool({ name: 'noop', description: 'Does nothing.', input: z.object({}), sideEffect: false, run: () => 'ok' })],
});
