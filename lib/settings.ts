/**
 * The names of the settings the AWS runtime reads from its environment, and the limits the deployment
 * must respect, in one module with no imports: the Lambda handlers read these names and the CDK construct
 * (infra/) sets them, so a renamed setting changes both or breaks the construct's tests.
 */

/** The DynamoDB table of runs, step records, history and the idempotency ledger. */
export const TABLE_NAME_ENV = 'TABLE_NAME';
/** The S3 bucket of large outputs and spilled values. */
export const BUCKET_NAME_ENV = 'BUCKET_NAME';
/** The SQS FIFO queue of run messages (one per agent). */
export const QUEUE_URL_ENV = 'QUEUE_URL';
/** The agent module's path, for handlers that load it at run time (the CLI, the unbundled functions). */
export const AGENT_ENV = 'STEPWISE_AGENT';
/** Days a checkpoint's history row is kept (DynamoDB TTL); the latest checkpoint never expires. */
export const RETENTION_DAYS_ENV = 'STEPWISE_RETENTION_DAYS';
/** A KMS key for blobs (SSE-KMS); SSE-S3 without it. */
export const KMS_KEY_ID_ENV = 'STEPWISE_KMS_KEY_ID';
/** On AWS: the Secrets Manager secret holding the Anthropic API key. */
export const API_KEY_SECRET_ENV = 'ANTHROPIC_API_KEY_SECRET_ID';
/** Locally: the Anthropic API key itself. */
export const API_KEY_ENV = 'ANTHROPIC_API_KEY';
/** The Secrets Manager secret holding the approval links' signing key (base64, at least 32 bytes). */
export const SIGNING_KEY_SECRET_ENV = 'STEPWISE_SIGNING_KEY_SECRET_ID';
/**
 * Off AWS (a host of your own, `npm run local-aws`): the approval links' signing key in a file (base64, at
 * least 32 bytes), instead of the secret. Every process that signs or checks links must read the same file.
 */
export const SIGNING_KEY_FILE_ENV = 'STEPWISE_SIGNING_KEY_FILE';
/** The verified SES sender of approval emails. */
export const EMAIL_FROM_ENV = 'STEPWISE_EMAIL_FROM';
/** A folder that approval emails are written to as .eml files, instead of sending them (locally by default beside the database). */
export const OUTBOX_ENV = 'STEPWISE_OUTBOX';
/** Where approval links point (the API's URL on AWS). */
export const PUBLIC_URL_ENV = 'STEPWISE_PUBLIC_URL';
/** The sweeper re-drives a running run with no checkpoint for this long. */
export const STALL_SECONDS_ENV = 'STEPWISE_STALL_SECONDS';
/** The model id for agents whose settings name none. */
export const MODEL_ENV = 'STEPWISE_MODEL';
/** Recorded in every checkpoint: which code wrote it. */
export const CODE_VERSION_ENV = 'STEPWISE_CODE_VERSION';

/** The most steps one worker process runs at once (`stepwise worker --concurrency`, runWorker's option). */
export const MAX_WORKER_CONCURRENCY = 256;

/**
 * Tries of one step beyond this fail its run: the step keeps killing its worker. The queue's dead-letter
 * receive count must stay above it, so the engine fails such a run with a reason before SQS moves its
 * message aside.
 */
export const DEFAULT_MAX_RECEIVES = 10;
/**
 * A tool's time in one try of its step, unless its `timeoutMs` says otherwise: a Lambda invocation's
 * longest life, so a tool that fits one runtime fits both, and a tool that hangs fails its try instead of
 * holding its run (and its worker) for good.
 */
export const DEFAULT_TOOL_TIMEOUT_MS = 15 * 60 * 1000;
/** The longest `timeoutMs` a tool may give: a timer's limit in Node (about 24.8 days). */
export const MAX_TOOL_TIMEOUT_MS = 2_147_483_647;
/** The whole model call, SDK retries and their waits included. */
export const DEFAULT_DEADLINE_MS = 300_000;
/**
 * Kept back from a worker invocation's remaining time to write the step's outcome after the model gives
 * up: the model call is aborted this long before Lambda would kill the invocation.
 */
export const DEFAULT_RESERVE_MS = 15_000;
/** The sweeper's default stall window: Lambda's longest invocation, so a run idle for longer is not inside a step. */
export const DEFAULT_SWEEPER_STALL_MS = 15 * 60 * 1000;
/** How far ahead the sweeper sends wait timers; it must run more often than this, or timers come late. */
export const DEFAULT_TIMER_LOOKAHEAD_MS = 15 * 60 * 1000;
/** Days of checkpoint history kept by default. */
export const DEFAULT_RETENTION_DAYS = 14;

/** CloudWatch metrics of the worker (EMF), in this namespace with the agent's name as the one dimension. */
export const METRICS_NAMESPACE = 'Stepwise';
export const METRICS_AGENT_DIMENSION = 'agent';
/**
 * And the deployment's (its stack's name, in STEPWISE_DEPLOYMENT): two stacks of one agent in an account
 * and region (staging and production) kept one set of metrics, and each one's alarms fired for the other's runs.
 */
export const METRICS_DEPLOYMENT_DIMENSION = 'deployment';
export const DEPLOYMENT_ENV = 'STEPWISE_DEPLOYMENT';
export const METRIC_NAMES = {
  /** A step completed: its record was written. */
  steps: 'StepsCompleted',
  /** A try of a step failed (a model error, an unusable reply, a tool that threw). */
  failedAttempts: 'FailedAttempts',
  runsFailed: 'RunsFailed',
  runsCompleted: 'RunsCompleted',
  /** Bytes of each checkpoint written. */
  checkpointBytes: 'CheckpointBytes',
  inputTokens: 'InputTokens',
  outputTokens: 'OutputTokens',
  cacheReadTokens: 'CacheReadTokens',
  cacheWriteTokens: 'CacheWriteTokens',
  /** Estimated model cost in US dollars (lib/llm/cost.ts). */
  modelCostUsd: 'ModelCostUsd',
} as const;
/** Powertools adds the service as a dimension of every metric: the worker's metrics carry this one. */
export const METRICS_SERVICE = 'stepwise-worker';
