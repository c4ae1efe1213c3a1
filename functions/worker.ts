import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { loadAgent, type AgentDefinition } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { awsWaitServices } from '../lib/aws/wait-services.ts';
import { createSqsWorkerHandler, type SqsWorkerHandler } from '../lib/aws/sqs-worker-handler.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { DEFAULT_MODEL } from '../lib/llm/anthropic.ts';
import { selectModel } from '../lib/llm/select-model.ts';
import { createLogger } from '../lib/log.ts';
import { AGENT_ENV } from '../lib/settings.ts';
import { CODE_VERSION } from '../lib/version.ts';
import { workerMetrics } from './metrics.ts';

/**
 * SQS-triggered worker: one record, one step of its run. Configuration comes from the environment:
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL, the agent (STEPWISE_AGENT, the path of its module, for `handler`;
 * a bundle made by the CDK construct imports it and calls `workerHandlerFor`), optionally
 * STEPWISE_CODE_VERSION, STEPWISE_RETENTION_DAYS, STEPWISE_KMS_KEY_ID and the model's key
 * (ANTHROPIC_API_KEY or ANTHROPIC_API_KEY_SECRET_ID); endpoints from the SDK's AWS_ENDPOINT_URL_*.
 * Wiring happens once per container (cold start) and is tried again if it failed.
 */
export type WorkerHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse>;

/** The worker Lambda for an agent: given itself (a bundle imports it statically) or loaded when first needed. */
export function workerHandlerFor(agent: AgentDefinition | (() => Promise<AgentDefinition>)): WorkerHandler {
  let wired: Promise<SqsWorkerHandler> | undefined;
  return async (event, context) => {
    wired ??= (typeof agent === 'function' ? agent() : Promise.resolve(agent)).then(wire).catch((error: unknown) => {
      wired = undefined;
      throw error;
    });
    return (await wired)(event, context);
  };
}

export const handler: WorkerHandler = async (event, context) => envHandler(event, context);

// Marked pure: a bundle of the construct imports only the factory, and esbuild then leaves this handler and
// loadAgent out (the worker's is held under 1 MB).
const envHandler = /* @__PURE__ */ workerHandlerFor(async () => {
  const agentPath = process.env[AGENT_ENV];
  if (!agentPath) throw new InvalidInputError(`${AGENT_ENV} is not set: give the path of the agent module the worker runs`);
  return loadAgent(agentPath);
});

async function wire(agent: AgentDefinition): Promise<SqsWorkerHandler> {
  const runtime = openAwsRuntime();
  const log = createLogger({ service: 'stepwise-worker', agent: agent.name });
  // MODEL SELECTION (lib/llm/select-model.ts): Claude with a configured key, else the agent's offlineModel(), else a clear error.
  const { model, label } = selectModel(agent);
  log.info({ event: 'worker-wired', model: label, table: runtime.tableName, queue: runtime.queueUrl }, 'worker ready');
  const metrics = workerMetrics(agent.name, (model as { defaultModel?: string }).defaultModel ?? DEFAULT_MODEL);
  const handle = createSqsWorkerHandler({
    runtime, agent, model, log, codeVersion: CODE_VERSION, waits: awsWaitServices(runtime, process.env, { log }),
    ...(metrics ? { onHandled: (handled) => metrics.record(handled) } : {}),
  });
  if (!metrics) return handle;
  return async (event, context) => {
    try {
      return await handle(event, context);
    } finally {
      metrics.publish();
    }
  };
}
