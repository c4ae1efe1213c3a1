import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import { handle } from 'hono/aws-lambda';
import { loadAgent } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { awsWaitServices } from '../lib/aws/wait-services.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createHttpApp } from '../lib/http/app.ts';
import { createLogger } from '../lib/log.ts';
import { systemClock } from '../lib/ports.ts';
import { CODE_VERSION } from '../lib/version.ts';

/**
 * API Gateway (HTTP API) handler: the same app as `stepwise serve`. The program routes are authorized by
 * IAM at the gateway; the approval pages are public, their signed token being the credential. Needs
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL, STEPWISE_AGENT and STEPWISE_SIGNING_KEY_SECRET_ID.
 */
type ApiHandler = (event: APIGatewayProxyEventV2, context: Context) => Promise<unknown>;
let wired: Promise<ApiHandler> | undefined;

export async function handler(event: APIGatewayProxyEventV2, context: Context): Promise<unknown> {
  wired ??= wire().catch((error: unknown) => {
    wired = undefined;
    throw error;
  });
  return (await wired)(event, context);
}

async function wire(): Promise<ApiHandler> {
  const agentPath = process.env.STEPWISE_AGENT;
  if (!agentPath) throw new InvalidInputError('STEPWISE_AGENT is not set: give the path of the agent module');
  const agent = await loadAgent(agentPath);
  const runtime = openAwsRuntime();
  const waits = awsWaitServices(runtime);
  if (!waits.signingKey) throw new InvalidInputError('STEPWISE_SIGNING_KEY_SECRET_ID is not set: approval links cannot be checked');
  const app = createHttpApp({
    store: runtime.store, blobs: runtime.blobs, queue: runtime.queue, clock: systemClock, workerId: 'api', codeVersion: CODE_VERSION,
    log: createLogger({ service: 'stepwise-api', agent: agent.name }), agent, signingKey: waits.signingKey, ...(waits.events ? { events: waits.events } : {}),
  });
  return handle(app) as ApiHandler;
}
