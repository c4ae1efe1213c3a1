import type { Context, EventBridgeEvent } from 'aws-lambda';
import { loadAgent, type AgentDefinition } from '../lib/agent.ts';
import { createEventHandler, type EventHandlerResult } from '../lib/aws/event-handler.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { awsWaitServices } from '../lib/aws/wait-services.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createLogger } from '../lib/log.ts';
import { AGENT_ENV } from '../lib/settings.ts';
import { CODE_VERSION } from '../lib/version.ts';

/**
 * EventBridge-triggered: events resume waiting runs and start runs (the agent's `startOn`). Needs
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL and the agent (STEPWISE_AGENT, or `eventsHandlerFor(agent)`) like the worker.
 */
export type EventsHandler = (event: EventBridgeEvent<string, unknown>, context: Context) => Promise<EventHandlerResult>;

export function eventsHandlerFor(agent: AgentDefinition | (() => Promise<AgentDefinition>)): EventsHandler {
  let wired: Promise<ReturnType<typeof createEventHandler>> | undefined;
  return async (event, context) => {
    wired ??= (typeof agent === 'function' ? agent() : Promise.resolve(agent)).then(wire).catch((error: unknown) => {
      wired = undefined;
      throw error;
    });
    return (await wired)(event, context);
  };
}

export const handler: EventsHandler = async (event, context) => envHandler(event, context);

// Marked pure: a bundle of the construct imports only the factory, and esbuild then leaves this handler and
// loadAgent out (the worker's is held under 1 MB).
const envHandler = /* @__PURE__ */ eventsHandlerFor(async () => {
  const agentPath = process.env[AGENT_ENV];
  if (!agentPath) throw new InvalidInputError(`${AGENT_ENV} is not set: give the path of the agent module`);
  return loadAgent(agentPath);
});

async function wire(agent: AgentDefinition): Promise<ReturnType<typeof createEventHandler>> {
  const runtime = openAwsRuntime();
  const log = createLogger({ service: 'stepwise-events', agent: agent.name });
  const waits = awsWaitServices(runtime, process.env, { log });
  return createEventHandler({ runtime, events: waits.events!, agent, log, codeVersion: CODE_VERSION });
}
