import type { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { InvalidInputError, errorMessage } from '../core/errors.ts';
import { errorName } from './dynamo-errors.ts';

/**
 * The outputs the stepwise construct (infra/stepwise-construct.ts) gives its stack, by output key: after
 * `cdk deploy`, `--stack <name>` finds the resources here instead of repeating them on every command.
 */
export const STACK_OUTPUT_KEYS = { tableName: 'TableName', bucketName: 'BucketName', queueUrl: 'QueueUrl', apiUrl: 'ApiUrl', agentNames: 'AgentNames' } as const;

export interface StackResources {
  stackName: string;
  tableName: string;
  bucketName: string;
  queueUrl: string;
  /** The HTTP API and approval pages, when the stack has them. */
  apiUrl?: string;
  /**
   * The agent whose workers read the queue: its name, then its former names (a JSON array in the output).
   * Absent from a stack deployed before the output was added.
   */
  agentNames?: string[];
}

/** One DescribeStacks call; a missing stack or a stack without stepwise's outputs is InvalidInputError. */
export async function readStackOutputs(stackName: string, client?: CloudFormationClient): Promise<StackResources> {
  const sdk = await import('@aws-sdk/client-cloudformation');
  const cloudformation = client ?? new sdk.CloudFormationClient({});
  try {
    let stack;
    try {
      stack = (await cloudformation.send(new sdk.DescribeStacksCommand({ StackName: stackName }))).Stacks?.[0];
    } catch (error) {
      // CloudFormation answers a missing stack with a ValidationError, not a not-found error.
      if (errorName(error) !== 'ValidationError' || !/does not exist/.test(errorMessage(error))) throw error;
    }
    if (!stack) {
      const region = await cloudformation.config.region();
      throw new InvalidInputError(`stack ${stackName} does not exist in ${region}: deploy it (cdk deploy), or check --stack, STEPWISE_STACK and AWS_REGION`);
    }
    const outputs = new Map((stack.Outputs ?? []).map((o) => [o.OutputKey ?? '', o.OutputValue ?? '']));
    const required = [STACK_OUTPUT_KEYS.tableName, STACK_OUTPUT_KEYS.bucketName, STACK_OUTPUT_KEYS.queueUrl];
    const missing = required.filter((key) => !outputs.get(key));
    if (missing.length) {
      throw new InvalidInputError(`stack ${stackName} has no output ${missing.join(', ')}: is it a stepwise stack? (its outputs: ${[...outputs.keys()].join(', ') || 'none'})`);
    }
    const apiUrl = outputs.get(STACK_OUTPUT_KEYS.apiUrl);
    const agentNames = parseAgentNames(stackName, outputs.get(STACK_OUTPUT_KEYS.agentNames));
    return {
      stackName,
      tableName: outputs.get(STACK_OUTPUT_KEYS.tableName)!,
      bucketName: outputs.get(STACK_OUTPUT_KEYS.bucketName)!,
      queueUrl: outputs.get(STACK_OUTPUT_KEYS.queueUrl)!,
      ...(apiUrl ? { apiUrl } : {}),
      ...(agentNames ? { agentNames } : {}),
    };
  } finally {
    if (!client) cloudformation.destroy();
  }
}

function parseAgentNames(stackName: string, output: string | undefined): string[] | undefined {
  if (!output) return undefined;
  let names: unknown;
  try {
    names = JSON.parse(output);
  } catch {
    names = undefined;
  }
  if (!Array.isArray(names) || !names.length || !names.every((n) => typeof n === 'string' && n)) {
    throw new InvalidInputError(`stack ${stackName}'s output ${STACK_OUTPUT_KEYS.agentNames} is not a JSON array of agent names: ${output.slice(0, 120)}`);
  }
  return names as string[];
}
