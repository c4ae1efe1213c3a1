/**
 * The event agent with a one-second wait: an event sent after that finds the deadline passed, and the
 * emit itself moves the run on with "timed out" (the CLI's emit says so).
 */
import { defineAgent } from '../../lib/agent.ts';
import { waitForEvent } from '../../lib/waits/tools.ts';
import { OneWaitModel } from './wait-agent.ts';

export default defineAgent({
  name: 'event-cli-short',
  offlineModel: () => new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key: 'order-late', timeoutSeconds: 1 } }),
  tools: [waitForEvent({ types: ['order.paid'] })],
});
