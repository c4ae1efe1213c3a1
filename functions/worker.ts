import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { loadAgent } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { awsWaitServices } from '../lib/aws/wait-services.ts';
import { createSqsWorkerHandler, type SqsWorkerHandler } from '../lib/aws/sqs-worker-handler.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { selectModel } from '../lib/llm/select-model.ts';
import { createLogger } from '../lib/log.ts';
import { CODE_VERSION } from '../lib/version.ts';

/**
 * SQS-triggered worker: one record, one step of its run. Configuration comes from the environment:
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL, STEPWISE_AGENT (path of the agent module), optionally
 * STEPWISE_CODE_VERSION, STEPWISE_RETENTION_DAYS, STEPWISE_KMS_KEY_ID and the model's key
 * (ANTHROPIC_API_KEY or ANTHROPIC_API_KEY_SECRET_ID); endpoints from the SDK's AWS_ENDPOINT_URL_*.
 * Wiring happens once per container (cold start) and is tried again if it failed.
 */
let wired: Promise<SqsWorkerHandler> | undefined;

export async function handler(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  wired ??= wire().catch((error: unknown) => {
    wired = undefined;
    throw error;
  });
  return (await wired)(event, context);
}

async function wire(): Promise<SqsWorkerHandler> {
  const agentPath = process.env.STEPWISE_AGENT;
  if (!agentPath) throw new InvalidInputError('STEPWISE_AGENT is not set: give the path of the agent module the worker runs');
  const agent = await loadAgent(agentPath);
  const runtime = openAwsRuntime();
  const log = createLogger({ service: 'stepwise-worker', agent: agent.name });
  // MODEL SELECTION (lib/llm/select-model.ts): Claude with a configured key, else the agent's offlineModel(), else a clear error.
  const { model, label } = await selectModel(agent);
  log.info({ event: 'worker-wired', model: label, table: runtime.tableName, queue: runtime.queueUrl }, 'worker ready');
  return createSqsWorkerHandler({ runtime, agent, model, log, codeVersion: CODE_VERSION, waits: awsWaitServices(runtime) });
}
