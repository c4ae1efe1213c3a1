import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import type { Hono } from 'hono';
import { handle } from 'hono/aws-lambda';
import { loadAgent, type AgentDefinition } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { awsWaitServices } from '../lib/aws/wait-services.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createHttpApp } from '../lib/http/app.ts';
import { ESCAPED_ROUTE_RESPONSE, escapesPublicRoute } from '../lib/http/gateway-route.ts';
import { createLogger } from '../lib/log.ts';
import { systemClock } from '../lib/ports.ts';
import { AGENT_ENV, SIGNING_KEY_SECRET_ENV } from '../lib/settings.ts';
import { CODE_VERSION } from '../lib/version.ts';

/**
 * API Gateway (HTTP API) handler: the same app as `stepwise serve`. The program routes are authorized by
 * IAM at the gateway; the approval pages are public, their signed token being the credential. Needs
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL, the agent (STEPWISE_AGENT for `handler`, or `apiHandlerFor(agent)`
 * in a bundle) and STEPWISE_SIGNING_KEY_SECRET_ID.
 */
export type ApiHandler = (event: APIGatewayProxyEventV2, context: Context) => Promise<unknown>;

export function apiHandlerFor(agent: AgentDefinition | (() => Promise<AgentDefinition>)): ApiHandler {
  let wired: Promise<ApiHandler> | undefined;
  return async (event, context) => {
    wired ??= (typeof agent === 'function' ? agent() : Promise.resolve(agent)).then(wire).catch((error: unknown) => {
      wired = undefined;
      throw error;
    });
    return (await wired)(event, context);
  };
}

export const handler: ApiHandler = async (event, context) => envHandler(event, context);

// Marked pure: a bundle of the construct imports only the factory, and esbuild then leaves this handler and
// loadAgent out (the worker's is held under 1 MB).
const envHandler = /* @__PURE__ */ apiHandlerFor(async () => {
  const agentPath = process.env[AGENT_ENV];
  if (!agentPath) throw new InvalidInputError(`${AGENT_ENV} is not set: give the path of the agent module`);
  return loadAgent(agentPath);
});

async function wire(agent: AgentDefinition): Promise<ApiHandler> {
  const runtime = openAwsRuntime();
  const log = createLogger({ service: 'stepwise-api', agent: agent.name });
  const waits = awsWaitServices(runtime, process.env, { log });
  if (!waits.signingKey) throw new InvalidInputError(`${SIGNING_KEY_SECRET_ENV} is not set: approval links cannot be checked`);
  // No authThrottle: each Lambda instance would count only its own part of an address's refusals; the
  // stage's throttle (the construct's apiThrottle) bounds them all, and IAM refuses the program routes at the gateway.
  const app = createHttpApp({
    store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: systemClock, workerId: 'api', codeVersion: CODE_VERSION,
    log, agent, agentQueue: true, signingKey: waits.signingKey, ...(waits.events ? { events: waits.events } : {}),
  });
  return gatewayHandler(app);
}

/** The app behind API Gateway, refusing a request on the public approval route that the app would route elsewhere. */
export function gatewayHandler(app: Hono): ApiHandler {
  const lambda = handle(app) as ApiHandler;
  return async (event, context) => (escapesPublicRoute(event) ? ESCAPED_ROUTE_RESPONSE : lambda(event, context));
}
