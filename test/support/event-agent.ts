/**
 * An agent whose run waits for one event (`order.paid` keyed by the goal) and then reports what it saw: the
 * CLI's event path (`status`, `emit`, a worker) is tried on it in real processes.
 */
import { defineAgent } from '../../lib/agent.ts';
import { waitForEvent } from '../../lib/waits/tools.ts';
import { OneWaitModel } from './wait-agent.ts';

export default defineAgent({
  name: 'event-cli',
  offlineModel: () => new OneWaitModel({ kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key: 'order-42' } }),
  tools: [waitForEvent({ types: ['order.paid'] })],
});
