import { defineAgent } from '../../lib/agent.ts';

/** An agent with no offline model: without an API key the worker must refuse it clearly. */
export default defineAgent({ name: 'no-model', tools: [] });
