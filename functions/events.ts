import type { Context, EventBridgeEvent } from 'aws-lambda';
import { loadAgent } from '../lib/agent.ts';
import { createEventHandler, type EventHandlerResult } from '../lib/aws/event-handler.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { awsWaitServices } from '../lib/aws/wait-services.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createLogger } from '../lib/log.ts';
import { CODE_VERSION } from '../lib/version.ts';

/**
 * EventBridge-triggered: events resume waiting runs and start runs (the agent's `startOn`). Needs
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL and STEPWISE_AGENT like the worker.
 */
let wired: Promise<ReturnType<typeof createEventHandler>> | undefined;

export async function handler(event: EventBridgeEvent<string, unknown>, context: Context): Promise<EventHandlerResult> {
  wired ??= wire().catch((error: unknown) => {
    wired = undefined;
    throw error;
  });
  return (await wired)(event, context);
}

async function wire(): Promise<ReturnType<typeof createEventHandler>> {
  const agentPath = process.env.STEPWISE_AGENT;
  if (!agentPath) throw new InvalidInputError('STEPWISE_AGENT is not set: give the path of the agent module');
  const agent = await loadAgent(agentPath);
  const runtime = openAwsRuntime();
  const waits = awsWaitServices(runtime);
  return createEventHandler({ runtime, events: waits.events!, agent, log: createLogger({ service: 'stepwise-events', agent: agent.name }), codeVersion: CODE_VERSION });
}
