import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { loadAgent, type AgentDefinition } from '../lib/agent.ts';
import { openAwsRuntime } from '../lib/aws/runtime.ts';
import { createSqsWorkerHandler, type SqsWorkerHandler } from '../lib/aws/sqs-worker-handler.ts';
import { InvalidInputError } from '../lib/core/errors.ts';
import { createLogger } from '../lib/log.ts';
import type { Model } from '../lib/ports.ts';

/**
 * SQS-triggered worker: one record, one step of its run. Configuration comes from the environment:
 * TABLE_NAME, BUCKET_NAME, QUEUE_URL, STEPWISE_AGENT (path of the agent module), optionally
 * STEPWISE_CODE_VERSION and STEPWISE_RETENTION_DAYS; endpoints from the SDK's AWS_ENDPOINT_URL_* variables.
 * Wiring happens once per container (cold start) and is retried if it failed.
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
  // MODEL SELECTION: once lib/llm/select-model.ts exists, this line becomes `const model = selectModel(agent);`
  const model = offlineModel(agent);
  return createSqsWorkerHandler({
    runtime, agent, model,
    log: createLogger({ service: 'stepwise-worker', agent: agent.name }),
    codeVersion: process.env.STEPWISE_CODE_VERSION ?? process.env.AWS_LAMBDA_FUNCTION_VERSION ?? 'dev',
  });
}

function offlineModel(agent: AgentDefinition): Model {
  if (agent.offlineModel) return agent.offlineModel();
  throw new InvalidInputError(`agent ${agent.name} has no offlineModel(), and the worker cannot call a hosted model yet (lib/llm/select-model.ts is not wired in)`);
}
