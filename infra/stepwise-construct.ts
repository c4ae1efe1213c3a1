import { createHash } from 'node:crypto';
import { dirname } from 'node:path';
import { Annotations, Aws, CfnOutput, Duration, Fn, RemovalPolicy, Stack, Stage, Token, Validations } from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigateway';
import * as apigwv2 from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpIamAuthorizer } from 'aws-cdk-lib/aws-apigatewayv2-authorizers';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import { NodejsFunction } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import {
  PK, SK, STATUS_INDEX, STATUS_INDEX_ATTRIBUTES, STATUS_KEY, STATUS_SORT, TTL_ATTRIBUTE,
  WAIT_DEADLINE, WAIT_INDEX, WAIT_INDEX_ATTRIBUTES, WAIT_SHARD,
} from '../lib/aws/table-layout.ts';
import {
  API_KEY_SECRET_ENV, BUCKET_NAME_ENV, CODE_VERSION_ENV, DEFAULT_MAX_RECEIVES, DEFAULT_RETENTION_DAYS, DEPLOYMENT_ENV, EMAIL_FROM_ENV,
  KMS_KEY_ID_ENV, MODEL_ENV, PUBLIC_URL_ENV, QUEUE_URL_ENV, RETENTION_DAYS_ENV, SIGNING_KEY_SECRET_ENV, STALL_SECONDS_ENV, TABLE_NAME_ENV,
} from '../lib/settings.ts';
import { publicUrlOf } from '../lib/waits/public-url.ts';
import { describeAgent, type AgentDescription } from './agent-description.ts';
import { FIFO_REQUIRED, invariantErrors, type DeploymentFacts, type TableFacts } from './invariants.ts';
import { StepwiseObservability } from './observability.ts';
import { WORKER_BUNDLING, findLockFile, writeEntry, type FunctionKind } from './worker-bundle.ts';

/** Settings of the worker function a user may change; the construct checks them against the invariants. */
export interface WorkerFunctionProps {
  /**
   * Default 256 MB: a step spends almost all its time waiting on the model, billed per MB-second whatever
   * the size, and the bundle runs a step in well under 256 MB (README, "What it costs").
   */
  readonly memorySize?: number;
  /** Default 6 minutes; at least the model's retry deadline plus the time kept back to record the outcome. */
  readonly timeout?: Duration;
  readonly reservedConcurrentExecutions?: number;
  /** Extra environment for the worker (the agent's own settings). */
  readonly environment?: Record<string, string>;
}

export interface SqsEventSourceSettings {
  /** Records per invocation, 1 to 10 (default 1: one run's step never waits for another run's model call). */
  readonly batchSize?: number;
  /** The most concurrent worker invocations the event source starts (2 to 1000); default: no limit. */
  readonly maxConcurrency?: number;
  /** Must stay true (an invariant); exposed so an override that turns it off is refused with the reason. */
  readonly reportBatchItemFailures?: boolean;
}

export interface StepwiseProps {
  /** The agent module (TypeScript or JavaScript) whose runs this deployment works. */
  readonly agentPath: string;

  /** A table this app defines (checked) or imports (not checked), e.g. shared with another agent's construct. */
  readonly existingTableObj?: dynamodb.ITable;
  /** Overrides of the table the construct creates; the key, TTL attribute and indexes are the runtime's. */
  readonly dynamoTableProps?: Partial<dynamodb.TableProps>;

  readonly existingBucketObj?: s3.IBucket;
  readonly bucketProps?: Partial<s3.BucketProps>;
  /** Server access logs of the bucket into a bucket of their own (default true). */
  readonly logS3AccessLogs?: boolean;
  readonly loggingBucketProps?: Partial<s3.BucketProps>;

  /** A FIFO queue this app defines, with its dead-letter queue; its settings are checked. */
  readonly existingQueueObj?: sqs.Queue;
  readonly queueProps?: Partial<sqs.QueueProps>;
  readonly deadLetterQueueProps?: Partial<sqs.QueueProps>;
  /** Receives before SQS moves a message to the dead-letter queue (default 15; above the engine's 10). */
  readonly maxReceiveCount?: number;

  readonly workerFunctionProps?: WorkerFunctionProps;
  readonly sqsEventSourceProps?: SqsEventSourceSettings;

  /** Days a checkpoint's history row is kept (default 7); also how long a deleted blob stays recoverable. */
  readonly retentionDays?: number;
  /** The verified SES identity approval emails come from; SES permission is limited to it. */
  readonly emailFrom?: string;
  /** Where approval links point, an http(s) URL checked at synth (default, or empty: the HTTP API's URL). */
  readonly publicUrl?: string;
  /** The model for agents whose settings name none (STEPWISE_MODEL). */
  readonly model?: string;
  /** The secret holding the Anthropic API key (default: one is created, to be filled in). */
  readonly existingApiKeySecret?: secretsmanager.ISecret;
  /** Events that resume waiting runs, delivered to the events function from `eventBus`. */
  readonly eventPatterns?: events.EventPattern[];
  /** The bus of `eventPatterns` and of the agent's `startOn` triggers (default: the account's default bus). */
  readonly eventBus?: events.IEventBus;
  /** How often the sweeper looks for stalled runs and due wait timers (default 5 minutes). */
  readonly sweepInterval?: Duration;
  /** A running run with no checkpoint for this long is re-driven (default 15 minutes, or a minute more than the worker timeout). */
  readonly stallAfter?: Duration;
  /** Throttling of the HTTP API's stage (default 20 requests per second, bursts of 40). */
  readonly apiThrottle?: { readonly rateLimit: number; readonly burstLimit: number };
  /** Recorded in every checkpoint (default, or empty: the bundle's content hash, so each build is told apart). */
  readonly codeVersion?: string;
  /** Days the functions' and the API's logs are kept (default one month). */
  readonly logRetention?: logs.RetentionDays;
  /** What the alarms do (an SNS topic action, ...); default: they only change state. */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /** Passed to the functions' bundling: the lock file of the project that holds the agent. */
  readonly depsLockFilePath?: string;
}

const DEFAULT_TIMEOUT = Duration.minutes(6);
const DEFAULT_MEMORY_MB = 256;
/** What reading and writing DynamoDB items, SQS messages and S3 objects under a customer-managed key takes. */
const KEY_ACTIONS = ['kms:Decrypt', 'kms:DescribeKey', 'kms:Encrypt', 'kms:GenerateDataKey'];
/** Above the engine's own limit, so it fails a crash-looping run with a reason before SQS moves the message. */
export const DEFAULT_MAX_RECEIVE_COUNT = DEFAULT_MAX_RECEIVES + 5;

/**
 * Everything one agent needs on AWS: the table, the bucket, the FIFO queue and its dead-letter queue, the
 * worker, API, events and sweeper functions (one bundle with the agent imported statically), the HTTP
 * API, EventBridge rules, the secrets, metrics, alarms and a dashboard. Table, bucket and queue follow the
 * AWS Solutions Constructs convention: pass `existing*Obj` to use your own, or `*Props` to adjust ours.
 * The runtime's safety settings are checked at synth (infra/invariants.ts).
 */
export class Stepwise extends Construct {
  readonly agent: AgentDescription;
  readonly table: dynamodb.ITable;
  readonly bucket: s3.IBucket;
  readonly loggingBucket?: s3.Bucket;
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.IQueue;
  /** Events the events function could not take after EventBridge's retries. */
  readonly eventsDeadLetterQueue: sqs.Queue;
  readonly workerFunction: NodejsFunction;
  readonly apiFunction: NodejsFunction;
  readonly eventsFunction: NodejsFunction;
  readonly sweeperFunction: NodejsFunction;
  readonly httpApi: apigwv2.HttpApi;
  /** The API's URL (approval links point here unless `publicUrl` says otherwise). */
  readonly apiUrl: string;
  readonly apiKeySecret: secretsmanager.ISecret;
  readonly signingKeySecret: secretsmanager.Secret;
  readonly eventRules: events.Rule[];
  readonly sweepRule: events.Rule;
  readonly codeVersion: string;
  readonly alarms: StepwiseObservability['alarms'];
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: StepwiseProps) {
    super(scope, id);
    this.agent = describeAgent(props.agentPath);
    const retentionDays = props.retentionDays ?? DEFAULT_RETENTION_DAYS;
    const logRetention = props.logRetention ?? logs.RetentionDays.ONE_MONTH;
    const timeout = props.workerFunctionProps?.timeout ?? DEFAULT_TIMEOUT;
    const sweepInterval = props.sweepInterval ?? Duration.minutes(5);
    // Longer than any invocation: a run idle for longer is not inside a step.
    const stallAfter = props.stallAfter ?? Duration.seconds(Math.max(15 * 60, timeout.toSeconds() + 60));
    checkExclusive(props);

    this.table = props.existingTableObj ?? this.createTable(props);
    const storage = this.createBucket(props, retentionDays);
    this.bucket = storage.bucket;
    if (storage.loggingBucket) this.loggingBucket = storage.loggingBucket;
    const queues = this.createQueues(props, timeout);
    this.queue = queues.queue;
    this.deadLetterQueue = queues.deadLetterQueue;
    this.eventsDeadLetterQueue = new sqs.Queue(this, 'EventsDeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED, enforceSSL: true, retentionPeriod: Duration.days(14),
    });
    Validations.of(this.eventsDeadLetterQueue).acknowledge({ id: 'AwsSolutions-SQS3', reason: 'It is the dead-letter queue of the EventBridge targets (events that could not be delivered): it needs none of its own.' });

    this.apiKeySecret = props.existingApiKeySecret ?? this.createApiKeySecret();
    this.signingKeySecret = new secretsmanager.Secret(this, 'SigningKey', {
      description: `stepwise ${this.agent.name}: the key approval links are signed with (base64, 48 bytes)`,
      // 64 characters of the base64 alphabet decode to 48 random bytes (at least 32 are required).
      generateSecretString: { passwordLength: 64, excludePunctuation: true, includeSpace: false },
    });
    Validations.of(this.signingKeySecret).acknowledge({ id: 'AwsSolutions-SMG4', reason: 'Links are checked with the current approval signing key and the one it replaced (AWSPREVIOUS) only, so rotations on a schedule closer together than a wait lasts (3 days by default) would void links still in an inbox; a rotation is a deliberate step: put a new value in by hand.' });

    const depsLockFilePath = props.depsLockFilePath ?? findLockFile();
    const outdir = Stage.of(this)!.outdir;
    const common: CommonEnvironment = {
      [TABLE_NAME_ENV]: this.table.tableName,
      [BUCKET_NAME_ENV]: this.bucket.bucketName,
      [QUEUE_URL_ENV]: this.queue.queueUrl,
      [RETENTION_DAYS_ENV]: String(retentionDays),
      // A blob is put under the key named here (SSE-KMS with it, which the bucket's own default would also
      // give) and otherwise by the bucket's default; the CLI, with no key to name, relies on that default.
      ...(this.bucket.encryptionKey ? { [KMS_KEY_ID_ENV]: this.bucket.encryptionKey.keyArn } : {}),
    };
    const fn = (name: FunctionKind, options: { timeout: Duration; memorySize: number; environment: Record<string, string>; description: string; reserved?: number }) => {
      const logGroup = new logs.LogGroup(this, `${capitalize(name)}Logs`, { retention: logRetention, removalPolicy: RemovalPolicy.DESTROY });
      const role = new iam.Role(this, `${capitalize(name)}Role`, {
        assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
        description: `stepwise ${this.agent.name}: the ${name} function`,
      });
      // Written by the function itself, so the role needs no managed policy with log rights on every group.
      logGroup.grantWrite(role);
      return new NodejsFunction(this, `${capitalize(name)}Function`, {
        entry: writeEntry(outdir, dirname(depsLockFilePath), name, props.agentPath, this.agent.exportName), handler: 'handler', role, logGroup,
        runtime: lambda.Runtime.NODEJS_24_X, architecture: lambda.Architecture.ARM_64,
        memorySize: options.memorySize, timeout: options.timeout, description: options.description,
        environment: options.environment, bundling: WORKER_BUNDLING,
        ...(options.reserved !== undefined ? { reservedConcurrentExecutions: options.reserved } : {}),
        depsLockFilePath,
      });
    };

    this.workerFunction = fn('worker', {
      timeout, memorySize: props.workerFunctionProps?.memorySize ?? DEFAULT_MEMORY_MB,
      description: `stepwise ${this.agent.name}: one step of a run per queue message`,
      environment: {
        ...props.workerFunctionProps?.environment, ...common,
        [API_KEY_SECRET_ENV]: this.apiKeySecret.secretArn,
        [SIGNING_KEY_SECRET_ENV]: this.signingKeySecret.secretArn,
        ...(props.emailFrom ? { [EMAIL_FROM_ENV]: props.emailFrom } : {}),
        ...(props.model ? { [MODEL_ENV]: props.model } : {}),
        // Its metrics' deployment dimension, which the alarms and the dashboard below read.
        [DEPLOYMENT_ENV]: Aws.STACK_NAME,
      },
      ...(props.workerFunctionProps?.reservedConcurrentExecutions !== undefined ? { reserved: props.workerFunctionProps.reservedConcurrentExecutions } : {}),
    });
    this.apiFunction = fn('api', {
      timeout: Duration.seconds(29), memorySize: DEFAULT_MEMORY_MB, description: `stepwise ${this.agent.name}: the HTTP API and the approval pages`,
      environment: {
        ...common, [SIGNING_KEY_SECRET_ENV]: this.signingKeySecret.secretArn,
        // The API prices usage no step records a model for (a run's cost, a fork's or retry's budget) by
        // the model the workers ask, as the worker's budget does.
        ...(props.model ? { [MODEL_ENV]: props.model } : {}),
      },
    });
    this.eventsFunction = fn('events', {
      timeout: Duration.minutes(1), memorySize: DEFAULT_MEMORY_MB, description: `stepwise ${this.agent.name}: EventBridge events resume waits and start runs`,
      environment: { ...common },
    });
    this.sweeperFunction = fn('sweeper', {
      timeout: Duration.minutes(2), memorySize: DEFAULT_MEMORY_MB, description: `stepwise ${this.agent.name}: re-drives stalled runs, sends due wait timers`,
      environment: { ...common, [STALL_SECONDS_ENV]: String(stallAfter.toSeconds()) },
    });

    // Stamped at build time: the content hash of the four bundles, unless the user names the version.
    // An empty one (an unset variable's `?? ''`) is not given: recorded, it would tell no two builds apart.
    this.codeVersion = props.codeVersion?.trim() || `bundle-${createHash('sha256').update(this.functions().map(bundleHash).join('\n')).digest('hex').slice(0, 12)}`;
    for (const f of this.functions()) f.addEnvironment(CODE_VERSION_ENV, this.codeVersion);

    this.grantData();
    const eventSource = new SqsEventSource(this.queue, {
      batchSize: props.sqsEventSourceProps?.batchSize ?? 1,
      reportBatchItemFailures: props.sqsEventSourceProps?.reportBatchItemFailures ?? true,
      ...(props.sqsEventSourceProps?.maxConcurrency !== undefined ? { maxConcurrency: props.sqsEventSourceProps.maxConcurrency } : {}),
    });
    this.workerFunction.addEventSource(eventSource);
    this.grantSecretsAndEmail(props);

    const api = this.createApi(props, logRetention);
    this.httpApi = api;
    this.apiUrl = api.apiEndpoint;
    if (props.publicUrl !== undefined && !Token.isUnresolved(props.publicUrl)) {
      // The worker checks it when it wires up: one it refuses would fail every step, not the deploy.
      try {
        publicUrlOf({ [PUBLIC_URL_ENV]: props.publicUrl });
      } catch (error) {
        throw new Error(`stepwise: publicUrl must be the http:// or https:// address approval links point at, got ${JSON.stringify(props.publicUrl)}`, { cause: error });
      }
    }
    this.workerFunction.addEnvironment(PUBLIC_URL_ENV, props.publicUrl?.trim() || this.apiUrl);

    this.eventRules = this.createEventRules(props);
    // EventBridge hands an event over asynchronously: an event the function then fails on is retried by
    // Lambda and, failing still, kept in the same dead-letter queue as the ones EventBridge could not deliver.
    this.eventsFunction.configureAsyncInvoke({ onFailure: new destinations.SqsDestination(this.eventsDeadLetterQueue), retryAttempts: 2, maxEventAge: Duration.hours(6) });
    this.sweepRule = new events.Rule(this, 'SweepSchedule', {
      description: `stepwise ${this.agent.name}: sweep stalled runs and send due wait timers`,
      schedule: events.Schedule.rate(sweepInterval),
      targets: [new targets.LambdaFunction(this.sweeperFunction, { retryAttempts: 0 })],
    });

    const observability = new StepwiseObservability(this, 'Observability', {
      agentName: this.agent.name, deployment: Aws.STACK_NAME, worker: this.workerFunction, api: this.apiFunction, events: this.eventsFunction, sweeper: this.sweeperFunction,
      queue: this.queue, deadLetterQueue: this.deadLetterQueue, eventsDeadLetterQueue: this.eventsDeadLetterQueue, httpApi: api,
      ...(props.alarmActions ? { alarmActions: props.alarmActions } : {}),
    });
    this.alarms = observability.alarms;
    this.dashboard = observability.dashboard;

    const facts = () => this.facts(sweepInterval, stallAfter, retentionDays);
    const errors = invariantErrors(facts());
    if (errors.length) throw new Error(`stepwise ${id}: ${errors.join('; ')}`);
    // Checked again at synth on what the resources finally say, so a later change (an escape hatch) is caught too.
    this.node.addValidation({ validate: () => invariantErrors(facts()) });
    if (props.existingTableObj && !tableFacts(props.existingTableObj)) {
      Annotations.of(this).addWarningV2('stepwise:unchecked-table', `the table ${props.existingTableObj.node.path} is not defined in this app: make sure its key is ${PK}/${SK}, its TTL is on ${TTL_ATTRIBUTE} and it has the ${STATUS_INDEX} and ${WAIT_INDEX} indexes`);
    }
    if (!props.emailFrom) {
      Annotations.of(this).addWarningV2('stepwise:no-email-from', 'no emailFrom: approval requests cannot be emailed (answer them through the API)');
    }
  }

  /** The CloudFormation outputs the `stepwise` CLI's `--stack` reads: TableName, BucketName, QueueUrl, ApiUrl, AgentNames. */
  addStackOutputs(): void {
    const stack = Stack.of(this);
    // The CLI's --stack reads these names: one agent's per stack.
    const taken = stack.node.tryFindChild('TableName');
    if (taken) {
      throw new Error(`stepwise: stack ${stack.stackName} already has the stack outputs \`stepwise --stack\` reads (TableName, QueueUrl, ...), so ${this.node.path} cannot add its own: they are one agent's per stack. Put this agent in a stack of its own to use --stack with it, or give the CLI its table and queue (--table, --queue-url)`);
    }
    new CfnOutput(stack, 'TableName', { value: this.table.tableName, description: 'stepwise: the run table' });
    new CfnOutput(stack, 'BucketName', { value: this.bucket.bucketName, description: 'stepwise: the blob bucket' });
    new CfnOutput(stack, 'QueueUrl', { value: this.queue.queueUrl, description: `stepwise: the run queue of agent ${this.agent.name}` });
    new CfnOutput(stack, 'ApiUrl', { value: this.apiUrl, description: 'stepwise: the HTTP API (IAM) and the approval pages' });
    // So the CLI sends to this queue only what this agent's workers take (agents may share the table).
    new CfnOutput(stack, 'AgentNames', { value: JSON.stringify([this.agent.name, ...this.agent.formerNames]), description: 'stepwise: the agent whose workers read the queue, then its former names' });
  }

  functions(): NodejsFunction[] {
    return [this.workerFunction, this.apiFunction, this.eventsFunction, this.sweeperFunction];
  }

  private createTable(props: StepwiseProps): dynamodb.Table {
    const overrides = props.dynamoTableProps ?? {};
    const table = new dynamodb.Table(this, 'Table', {
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      removalPolicy: RemovalPolicy.RETAIN,
      ...overrides,
      partitionKey: overrides.partitionKey ?? { name: PK, type: dynamodb.AttributeType.STRING },
      sortKey: overrides.sortKey ?? { name: SK, type: dynamodb.AttributeType.STRING },
      timeToLiveAttribute: 'timeToLiveAttribute' in overrides ? overrides.timeToLiveAttribute : TTL_ATTRIBUTE,
    });
    table.addGlobalSecondaryIndex({
      indexName: STATUS_INDEX,
      partitionKey: { name: STATUS_KEY, type: dynamodb.AttributeType.STRING },
      sortKey: { name: STATUS_SORT, type: dynamodb.AttributeType.NUMBER },
      // Only what a listing shows: the index is written on every step, so it must stay small.
      projectionType: dynamodb.ProjectionType.INCLUDE, nonKeyAttributes: [...STATUS_INDEX_ATTRIBUTES],
    });
    table.addGlobalSecondaryIndex({
      indexName: WAIT_INDEX,
      partitionKey: { name: WAIT_SHARD, type: dynamodb.AttributeType.STRING },
      sortKey: { name: WAIT_DEADLINE, type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.INCLUDE, nonKeyAttributes: [...WAIT_INDEX_ATTRIBUTES],
    });
    return table;
  }

  private createBucket(props: StepwiseProps, retentionDays: number): { bucket: s3.IBucket; loggingBucket?: s3.Bucket } {
    if (props.existingBucketObj) return { bucket: props.existingBucketObj };
    const secure = { blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL, enforceSSL: true, encryption: s3.BucketEncryption.S3_MANAGED, minimumTLSVersion: 1.2 };
    let loggingBucket: s3.Bucket | undefined;
    if (props.logS3AccessLogs ?? true) {
      loggingBucket = new s3.Bucket(this, 'AccessLogs', {
        ...secure, objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_PREFERRED, removalPolicy: RemovalPolicy.RETAIN,
        lifecycleRules: [{ expiration: Duration.days(90), abortIncompleteMultipartUploadAfter: Duration.days(1) }],
        ...props.loggingBucketProps,
      });
    }
    const bucket = new s3.Bucket(this, 'Blobs', {
      ...secure,
      // A blob is referenced by step records, which never expire, so no current object expires; versions
      // keep an overwritten or deleted blob recoverable for the checkpoint retention window.
      versioned: true,
      lifecycleRules: [{
        noncurrentVersionExpiration: Duration.days(retentionDays), expiredObjectDeleteMarker: true,
        abortIncompleteMultipartUploadAfter: Duration.days(1),
      }],
      removalPolicy: RemovalPolicy.RETAIN,
      ...(loggingBucket ? { serverAccessLogsBucket: loggingBucket, serverAccessLogsPrefix: 'blobs/' } : {}),
      ...props.bucketProps,
    });
    if (!loggingBucket) Validations.of(bucket).acknowledge({ id: 'AwsSolutions-S1', reason: 'Server access logging was turned off by logS3AccessLogs: false.' });
    return { bucket, ...(loggingBucket ? { loggingBucket } : {}) };
  }

  private createQueues(props: StepwiseProps, timeout: Duration): { queue: sqs.Queue; deadLetterQueue: sqs.IQueue } {
    if (props.existingQueueObj) {
      const dlq = props.existingQueueObj.deadLetterQueue?.queue;
      if (!dlq) throw new Error(`stepwise: existingQueueObj ${props.existingQueueObj.node.path} has no dead-letter queue; the run queue needs one with a receive count above ${DEFAULT_MAX_RECEIVES}`);
      return { queue: props.existingQueueObj, deadLetterQueue: dlq };
    }
    // Said before CDK refuses the FIFO-only settings below with a message that does not say why.
    if (props.queueProps?.fifo === false) throw new Error(`stepwise: ${FIFO_REQUIRED}`);
    const secure = { encryption: sqs.QueueEncryption.SQS_MANAGED, enforceSSL: true };
    // A dead-letter queue named in queueProps is the one the queue redrives to: it is the one to watch and
    // check, and the props of the one the construct would make would not apply to it.
    const given = props.queueProps?.deadLetterQueue;
    if (given && (props.deadLetterQueueProps !== undefined || props.maxReceiveCount !== undefined)) {
      throw new Error('stepwise: give queueProps.deadLetterQueue or deadLetterQueueProps and maxReceiveCount, not both (they would not apply to the dead-letter queue given)');
    }
    const deadLetterQueue = given?.queue ?? new sqs.Queue(this, 'DeadLetterQueue', {
      ...secure, fifo: true, retentionPeriod: Duration.days(14), ...props.deadLetterQueueProps,
    });
    const queue = new sqs.Queue(this, 'Queue', {
      ...secure,
      fifo: true,
      // High-throughput FIFO: deduplication and throughput per message group (= per run).
      deduplicationScope: sqs.DeduplicationScope.MESSAGE_GROUP,
      fifoThroughputLimit: sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
      contentBasedDeduplication: false,
      visibilityTimeout: Duration.seconds(6 * timeout.toSeconds()),
      deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: props.maxReceiveCount ?? DEFAULT_MAX_RECEIVE_COUNT },
      ...props.queueProps,
    });
    return { queue, deadLetterQueue };
  }

  private createApiKeySecret(): secretsmanager.Secret {
    const secret = new secretsmanager.Secret(this, 'AnthropicApiKey', {
      description: `stepwise ${this.agent.name}: the Anthropic API key (put the key in as the secret's value; until then steps wait for it)`,
    });
    Validations.of(secret).acknowledge({ id: 'AwsSolutions-SMG4', reason: 'The Anthropic API key is issued by Anthropic, not by a rotation Lambda: rotate it by putting the new key in; workers read the secret again every 5 minutes and after a 401.' });
    return secret;
  }

  /** Item-level DynamoDB rights on the table and its two indexes, objects under blobs/, the run queue. */
  private grantData(): void {
    const tableArn = this.table.tableArn;
    const indexArns = [STATUS_INDEX, WAIT_INDEX].map((name) => `${tableArn}/index/${name}`);
    const readWrite = ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:ConditionCheckItem'];
    const blobs = this.bucket.arnForObjects('blobs/*');
    for (const f of [this.workerFunction, this.apiFunction, this.eventsFunction]) {
      f.addToRolePolicy(new iam.PolicyStatement({ actions: readWrite, resources: [tableArn] }));
      f.addToRolePolicy(new iam.PolicyStatement({ actions: ['dynamodb:Query'], resources: indexArns }));
      f.addToRolePolicy(new iam.PolicyStatement({ actions: ['s3:GetObject', 's3:PutObject'], resources: [blobs] }));
      f.addToRolePolicy(new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [this.queue.queueArn] }));
      Validations.of(f.role!).acknowledge({
        id: `AwsSolutions-IAM5[Resource::<${this.bucketLogicalRef()}>/blobs/*]`,
        reason: 'Blobs are stored by their content hash under blobs/: their keys are not known in advance, and the grant is limited to that prefix of this bucket.',
      });
    }
    // DELETE /runs/:id removes an ended run's items in batches (DynamoCheckpointStore.deleteRun).
    this.apiFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['dynamodb:BatchWriteItem'], resources: [tableArn] }));
    // The worker hides a message again for a retry's backoff and for a group behind a failed record.
    this.workerFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['sqs:ChangeMessageVisibility'], resources: [this.queue.queueArn] }));
    // The sweeper only reads: stalled runs and due waits through the indexes, then sends their messages.
    this.sweeperFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['dynamodb:Query'], resources: indexArns }));
    this.sweeperFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [this.queue.queueArn] }));
    this.grantKeys();
  }

  /**
   * A table, queue or bucket encrypted with a customer-managed KMS key (by dynamoTableProps, queueProps,
   * bucketProps, or an existing resource) is read and written through that key: every function that
   * touches the resource needs it, or each call fails with AccessDenied. AWS-owned and managed keys need
   * no grant (the defaults). The four actions cover reading and writing the data of all three services.
   */
  private grantKeys(): void {
    const uses: [kms.IKey | undefined, lambda.Function[]][] = [
      [this.table.encryptionKey, [this.workerFunction, this.apiFunction, this.eventsFunction, this.sweeperFunction]],
      [this.queue.encryptionMasterKey, [this.workerFunction, this.apiFunction, this.eventsFunction, this.sweeperFunction]],
      [this.bucket.encryptionKey, [this.workerFunction, this.apiFunction, this.eventsFunction]],
    ];
    for (const [key, functions] of uses) {
      for (const f of functions) key?.grant(f, ...KEY_ACTIONS);
    }
  }

  private grantSecretsAndEmail(props: StepwiseProps): void {
    this.apiKeySecret.grantRead(this.workerFunction);
    this.signingKeySecret.grantRead(this.workerFunction);
    this.signingKeySecret.grantRead(this.apiFunction);
    if (!props.emailFrom) return;
    // SES sends only from a verified address or domain: anything else would deploy, then fail every email.
    if (!Token.isUnresolved(props.emailFrom) && !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(props.emailFrom)) {
      throw new Error(`stepwise: emailFrom must be an email address (the verified SES sender), got ${JSON.stringify(props.emailFrom)}`);
    }
    const stack = Stack.of(this);
    // A sender is verified as the address or as its domain: both identities, and only this From address.
    const domain = Token.isUnresolved(props.emailFrom) ? Fn.select(1, Fn.split('@', props.emailFrom)) : props.emailFrom.split('@')[1] ?? props.emailFrom;
    const identity = (name: string) => stack.formatArn({ service: 'ses', resource: 'identity', resourceName: name });
    this.workerFunction.addToRolePolicy(new iam.PolicyStatement({
      actions: ['ses:SendEmail'],
      resources: [identity(props.emailFrom), identity(domain)],
      conditions: { StringEquals: { 'ses:FromAddress': props.emailFrom } },
    }));
  }

  private createApi(props: StepwiseProps, logRetention: logs.RetentionDays): apigwv2.HttpApi {
    const integration = new HttpLambdaIntegration('Integration', this.apiFunction, { payloadFormatVersion: apigwv2.PayloadFormatVersion.VERSION_2_0 });
    const api = new apigwv2.HttpApi(this, 'HttpApi', {
      description: `stepwise ${this.agent.name}: runs, waits and events (IAM), approval pages (their token)`,
      createDefaultStage: false,
      // Every route but the approval pages: a program signs its requests (SigV4) with IAM credentials.
      defaultIntegration: integration,
      defaultAuthorizer: new HttpIamAuthorizer(),
    });
    for (const method of [apigwv2.HttpMethod.GET, apigwv2.HttpMethod.POST]) {
      const [route] = api.addRoutes({ path: '/approvals/{token}', methods: [method], integration, authorizer: new apigwv2.HttpNoneAuthorizer() });
      Validations.of(route!).acknowledge({
        id: 'AwsSolutions-APIG4',
        reason: 'The approval page is opened from an email by a person without AWS credentials: its signed, single-use, expiring token (bound to the approver) is the credential, checked by the handler; GET only shows the page, POST decides.',
      });
    }
    const throttle = { rateLimit: props.apiThrottle?.rateLimit ?? 20, burstLimit: props.apiThrottle?.burstLimit ?? 40 };
    // API Gateway refuses these at deploy; a deploy-time parameter is left to it.
    if (!Token.isUnresolved(throttle.rateLimit) && !(Number.isFinite(throttle.rateLimit) && throttle.rateLimit >= 0)) {
      throw new Error(`stepwise: apiThrottle.rateLimit must be a number of requests per second, 0 or more, got ${throttle.rateLimit}`);
    }
    if (!Token.isUnresolved(throttle.burstLimit) && !(Number.isInteger(throttle.burstLimit) && throttle.burstLimit >= 0)) {
      throw new Error(`stepwise: apiThrottle.burstLimit must be a whole number of requests, 0 or more, got ${throttle.burstLimit}`);
    }
    const accessLogs = new logs.LogGroup(this, 'ApiAccessLogs', { retention: logRetention, removalPolicy: RemovalPolicy.DESTROY });
    new apigwv2.HttpStage(this, 'ApiStage', {
      httpApi: api, stageName: '$default', autoDeploy: true,
      throttle,
      accessLogSettings: {
        destination: new apigwv2.LogGroupLogDestination(accessLogs),
        // The route key, not the path: an approval path carries its token, a credential.
        format: apigw.AccessLogFormat.custom(JSON.stringify({
          requestId: '$context.requestId', time: '$context.requestTime', route: '$context.routeKey', status: '$context.status',
          latencyMs: '$context.responseLatency', caller: '$context.identity.userArn', sourceIp: '$context.identity.sourceIp',
          integrationError: '$context.integrationErrorMessage',
        })),
      },
    });
    return api;
  }

  private createEventRules(props: StepwiseProps): events.Rule[] {
    const target = () => new targets.LambdaFunction(this.eventsFunction, {
      deadLetterQueue: this.eventsDeadLetterQueue, retryAttempts: 8, maxEventAge: Duration.hours(24),
    });
    const bus = props.eventBus ? { eventBus: props.eventBus } : {};
    const rules: events.Rule[] = [];
    (props.eventPatterns ?? []).forEach((eventPattern, i) => {
      rules.push(new events.Rule(this, `WaitEvents${i}`, { ...bus, eventPattern, description: `stepwise ${this.agent.name}: events that resume waiting runs`, targets: [target()] }));
    });
    this.agent.startOn.forEach((trigger, i) => {
      if (trigger.source === undefined && trigger.detailType === undefined) {
        throw new Error(`stepwise: startOn trigger ${i} of agent ${this.agent.name} names neither a source nor a detail type: an EventBridge rule cannot match every event`);
      }
      rules.push(new events.Rule(this, `StartOn${i}`, {
        ...bus, description: `stepwise ${this.agent.name}: events that start runs (startOn ${i})`, targets: [target()],
        eventPattern: { ...(trigger.source !== undefined ? { source: [trigger.source] } : {}), ...(trigger.detailType !== undefined ? { detailType: [trigger.detailType] } : {}) },
      }));
    });
    return rules;
  }

  private facts(sweepInterval: Duration, stallAfter: Duration, retentionDays: number): DeploymentFacts {
    const cfnQueue = this.queue.node.defaultChild as sqs.CfnQueue;
    const cfnWorker = this.workerFunction.node.defaultChild as lambda.CfnFunction;
    const mapping = this.workerFunction.node.findAll().find((c): c is lambda.CfnEventSourceMapping => c instanceof lambda.CfnEventSourceMapping);
    const redrive = resolved(this, cfnQueue.redrivePolicy) as { maxReceiveCount?: unknown } | undefined;
    const scaling = resolved(this, mapping?.scalingConfig) as { maximumConcurrency?: unknown } | undefined;
    const table = tableFacts(this.table);
    return {
      queueFifo: resolved(this, cfnQueue.fifoQueue) as boolean | undefined,
      visibilityTimeoutSeconds: numberOf(this, cfnQueue.visibilityTimeout),
      maxReceiveCount: redrive ? numberOf(this, redrive.maxReceiveCount) ?? Number.NaN : undefined,
      deadLetterQueueFifo: this.deadLetterQueue.fifo,
      workerTimeoutSeconds: numberOf(this, cfnWorker.timeout),
      // Not safety settings: a deploy-time parameter is left to CloudFormation.
      workerMemoryMb: numberOf(this, cfnWorker.memorySize),
      reservedConcurrency: numberOf(this, cfnWorker.reservedConcurrentExecutions),
      maxConcurrency: numberOf(this, scaling?.maximumConcurrency),
      functionResponseTypes: resolved(this, mapping?.functionResponseTypes) as string[] | undefined,
      // Lambda's own default when the mapping names none.
      batchSize: mapping && mapping.batchSize === undefined ? 10 : numberOf(this, mapping?.batchSize),
      ...(table ? { table } : {}),
      sweepIntervalSeconds: sweepInterval.toSeconds(),
      stallSeconds: stallAfter.toSeconds(),
      retentionDays,
    };
  }

  private bucketLogicalRef(): string {
    const cfn = this.bucket.node.defaultChild as s3.CfnBucket | undefined;
    return cfn ? `${Stack.of(this).resolve(cfn.logicalId)}.Arn` : this.bucket.bucketArn;
  }
}

type CommonEnvironment = Record<string, string>;

function checkExclusive(props: StepwiseProps): void {
  const pairs: [string, unknown, string, unknown][] = [
    ['existingTableObj', props.existingTableObj, 'dynamoTableProps', props.dynamoTableProps],
    ['existingBucketObj', props.existingBucketObj, 'bucketProps', props.bucketProps],
    ['existingBucketObj', props.existingBucketObj, 'loggingBucketProps', props.loggingBucketProps],
    ['existingBucketObj', props.existingBucketObj, 'logS3AccessLogs', props.logS3AccessLogs],
    ['existingQueueObj', props.existingQueueObj, 'queueProps', props.queueProps],
    ['existingQueueObj', props.existingQueueObj, 'deadLetterQueueProps', props.deadLetterQueueProps],
    ['existingQueueObj', props.existingQueueObj, 'maxReceiveCount', props.maxReceiveCount],
  ];
  for (const [a, va, b, vb] of pairs) {
    if (va !== undefined && vb !== undefined) throw new Error(`stepwise: give ${a} or ${b}, not both (the props would not apply to an existing resource)`);
  }
}

/** The table's settings, read from its CloudFormation resource; undefined for a table this app does not define. */
export function tableFacts(table: dynamodb.ITable): TableFacts | undefined {
  const cfn = table.node.defaultChild;
  if (!(cfn instanceof dynamodb.CfnTable)) return undefined;
  const resolved = (value: unknown) => (value === undefined ? undefined : Stack.of(cfn).resolve(value));
  const keys = (schema: unknown): [string | undefined, string | undefined] => {
    const list = (resolved(schema) ?? []) as { attributeName: string; keyType: string }[];
    return [list.find((k) => k.keyType === 'HASH')?.attributeName, list.find((k) => k.keyType === 'RANGE')?.attributeName];
  };
  const [partitionKey, sortKey] = keys(cfn.keySchema);
  const ttl = resolved(cfn.timeToLiveSpecification) as { attributeName?: string; enabled?: boolean } | undefined;
  const indexes = new Map<string, [string | undefined, string | undefined]>();
  for (const index of (resolved(cfn.globalSecondaryIndexes) ?? []) as { indexName: string; keySchema: unknown }[]) {
    indexes.set(index.indexName, keys(index.keySchema));
  }
  return { partitionKey, sortKey, ttlAttribute: ttl?.attributeName, ttlEnabled: ttl?.enabled === true, indexes };
}

/** The plain value behind an L1 property (the L2s fill some lazily); references stay intrinsic objects. */
function resolved(scope: Construct, value: unknown): unknown {
  if (value === undefined || value === null) return undefined;
  return Stack.of(scope).resolve(value);
}

/** A number known at synth, or undefined (a parameter, a reference): a setting that cannot be checked. */
function numberOf(scope: Construct, value: unknown): number | undefined {
  const v = resolved(scope, value);
  return typeof v === 'number' ? v : typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : undefined;
}

function capitalize(name: string): string {
  return name[0]!.toUpperCase() + name.slice(1);
}

/** The content hash of a function's bundle (its asset); when a test skips bundling, a stand-in. */
function bundleHash(fn: lambda.Function): string {
  const asset = fn.node.tryFindChild('Code') as s3assets.Asset | undefined;
  if (!asset?.assetHash) throw new Error(`stepwise: no code asset under ${fn.node.path}`);
  return asset.assetHash;
}
