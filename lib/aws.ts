/**
 * `stepwise/aws`: the AWS runtime (DynamoDB, S3, SQS FIFO), the sweep a worker of your own needs on it,
 * and the provisioning `stepwise init --backend aws` uses. A module of its own so that importing
 * `stepwise` never loads the AWS SDK.
 */
export { openAwsRuntime } from './aws/runtime.ts';
export type { AwsRuntime, AwsRuntimeOptions } from './aws/runtime.ts';
export { createAwsClients } from './aws/clients.ts';
export type { AwsClientOptions, AwsClients } from './aws/clients.ts';
export { ensureBucket, ensureQueue, ensureTable } from './aws/provision.ts';
export type { QueueOptions } from './aws/provision.ts';
export { sweepRuns } from './aws/run-sweep.ts';
export type { RunSweep, RunSweepOptions } from './aws/run-sweep.ts';
export { readStackOutputs, STACK_OUTPUT_KEYS } from './aws/stack-outputs.ts';
export type { StackResources } from './aws/stack-outputs.ts';
