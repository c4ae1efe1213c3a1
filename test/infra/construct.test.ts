import { createHash } from 'node:crypto';
import { App, Duration, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  HEAD_SK, PK, SK, STATUS_INDEX, STATUS_INDEX_ATTRIBUTES, STATUS_KEY, STATUS_SORT, TTL_ATTRIBUTE,
  WAIT_DEADLINE, WAIT_INDEX, WAIT_INDEX_ATTRIBUTES, WAIT_SHARD,
} from '../../lib/aws/table-layout.ts';
import { ensureQueue, ensureTable } from '../../lib/aws/provision.ts';
import {
  API_KEY_SECRET_ENV, BUCKET_NAME_ENV, CODE_VERSION_ENV, DEFAULT_MAX_RECEIVES, EMAIL_FROM_ENV, KMS_KEY_ID_ENV, METRIC_NAMES, METRICS_AGENT_DIMENSION, METRICS_DEPLOYMENT_DIMENSION, DEPLOYMENT_ENV,
  DEFAULT_RETENTION_DAYS, METRICS_NAMESPACE, METRICS_SERVICE, MODEL_ENV, PUBLIC_URL_ENV, QUEUE_URL_ENV, RETENTION_DAYS_ENV, SIGNING_KEY_SECRET_ENV,
  STALL_SECONDS_ENV, TABLE_NAME_ENV,
} from '../../lib/settings.ts';
import { Stepwise } from '../../infra/stepwise-construct.ts';
import { StepwiseStack } from '../../infra/stepwise-stack.ts';
import { FIXTURE_AGENT, cdkContext, synthStepwise } from './synth-support.ts';
import { tempDir } from '../support/temp-dirs.ts';

/** The synthesized template of the construct: every resource property the runtime relies on. */

type Json = Record<string, any>;
let template: Template;
let json: Json;
let stepwise: Stepwise;
const resources = (type: string): [string, Json][] => Object.entries(json.Resources as Json).filter(([, r]) => r.Type === type) as [string, Json][];
const only = (type: string): [string, Json] => {
  const found = resources(type);
  expect(found, type).toHaveLength(1);
  return found[0]!;
};
const logicalIdOf = (construct: { node: { defaultChild?: unknown } }) => template && (stepwise.node.scope as any).resolve((construct.node.defaultChild as any).logicalId);
const FUNCTIONS = { 'worker': 'workerFunction', 'api': 'apiFunction', 'events': 'eventsFunction', 'sweeper': 'sweeperFunction' } as const;
/** A function of the construct by its role (each has its own bundle whose handler is `index.handler`). */
const fnOf = (kind: keyof typeof FUNCTIONS, s: Stepwise = stepwise, j: Json = json): [string, Json] => {
  const id = (s.node.scope as any).resolve((s[FUNCTIONS[kind]].node.defaultChild as any).logicalId) as string;
  return [id, j.Resources[id]];
};

beforeAll(() => {
  ({ template, stepwise } = synthStepwise({ model: 'claude-haiku-4-5' }));
  json = template.toJSON();
});

/** What lib/aws/provision.ts sends to create the runtime's table and queue, recorded by a stub client. */
async function provisioned(): Promise<{ table: Json; queue: Json; dlq: Json }> {
  const sent: Json[] = [];
  const dynamo = {
    send: async (command: { constructor: { name: string }; input: Json }) => {
      sent.push({ name: command.constructor.name, input: command.input });
      // The table as created: ensureTable checks its keys and indexes before it changes anything.
      const created = sent.find((s) => s.name === 'CreateTableCommand')?.input;
      if (command.constructor.name === 'DescribeTableCommand') return { Table: { TableStatus: 'ACTIVE', KeySchema: created?.KeySchema, GlobalSecondaryIndexes: created?.GlobalSecondaryIndexes } };
      if (command.constructor.name === 'DescribeTimeToLiveCommand') return { TimeToLiveDescription: { TimeToLiveStatus: 'ENABLED' } };
      return {};
    },
  };
  const sqs = {
    send: async (command: { constructor: { name: string }; input: Json }) => {
      sent.push({ name: command.constructor.name, input: command.input });
      if (command.constructor.name === 'CreateQueueCommand') return { QueueUrl: `https://sqs/${command.input.QueueName}` };
      return { Attributes: { QueueArn: 'arn:aws:sqs:us-east-1:1:dlq' } };
    },
  };
  await ensureTable(dynamo as never, 't');
  await ensureQueue(sqs as never, 'q');
  const creates = sent.filter((s) => s.name === 'CreateQueueCommand').map((s) => s.input);
  return { table: sent.find((s) => s.name === 'CreateTableCommand')!.input, queue: creates.find((q) => q.QueueName === 'q.fifo')!, dlq: creates.find((q) => q.QueueName === 'q-dlq.fifo')! };
}

describe('the table', () => {
  it('is the table the runtime provisions: the same keys, attribute types and indexes with their projections', async () => {
    const { table } = await provisioned();
    const [, resource] = only('AWS::DynamoDB::Table');
    const p = resource.Properties;
    const byName = (list: Json[], key: string) => [...list].sort((a, b) => String(a[key]).localeCompare(String(b[key])));
    expect(byName(p.AttributeDefinitions, 'AttributeName')).toEqual(byName(table.AttributeDefinitions, 'AttributeName'));
    expect(p.KeySchema).toEqual(table.KeySchema);
    expect(p.KeySchema).toEqual([{ AttributeName: PK, KeyType: 'HASH' }, { AttributeName: SK, KeyType: 'RANGE' }]);
    expect(byName(p.GlobalSecondaryIndexes, 'IndexName')).toEqual(byName(table.GlobalSecondaryIndexes, 'IndexName'));
    const index = (name: string) => p.GlobalSecondaryIndexes.find((i: Json) => i.IndexName === name);
    expect(index(STATUS_INDEX)).toEqual({
      IndexName: STATUS_INDEX, KeySchema: [{ AttributeName: STATUS_KEY, KeyType: 'HASH' }, { AttributeName: STATUS_SORT, KeyType: 'RANGE' }],
      Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: STATUS_INDEX_ATTRIBUTES },
    });
    expect(index(WAIT_INDEX).KeySchema).toEqual([{ AttributeName: WAIT_SHARD, KeyType: 'HASH' }, { AttributeName: WAIT_DEADLINE, KeyType: 'RANGE' }]);
    expect(index(WAIT_INDEX).Projection).toEqual({ ProjectionType: 'INCLUDE', NonKeyAttributes: WAIT_INDEX_ATTRIBUTES });
    expect(HEAD_SK).toBe('h');
  });

  it('is on demand, with point-in-time recovery, encryption, TTL on the attribute the runtime writes, and kept on stack deletion', () => {
    template.hasResource('AWS::DynamoDB::Table', {
      Properties: {
        BillingMode: 'PAY_PER_REQUEST',
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        SSESpecification: { SSEEnabled: true },
        TimeToLiveSpecification: { AttributeName: TTL_ATTRIBUTE, Enabled: true },
      },
      DeletionPolicy: 'Retain', UpdateReplacePolicy: 'Retain',
    });
    expect(TTL_ATTRIBUTE).toBe('expiresAt');
  });
});

describe('the bucket', () => {
  it('blocks public access, is encrypted and versioned, logs access, and expires only old versions, after the retention window', () => {
    const blobs = resources('AWS::S3::Bucket').find(([, r]) => r.Properties.VersioningConfiguration)!;
    expect(blobs[1].Properties).toMatchObject({
      PublicAccessBlockConfiguration: { BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true },
      BucketEncryption: { ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }] },
      VersioningConfiguration: { Status: 'Enabled' },
      LoggingConfiguration: { DestinationBucketName: { Ref: logicalIdOf(stepwise.loggingBucket!) }, LogFilePrefix: 'blobs/' },
    });
    // Step records never expire and point at their blobs: no current object may expire.
    const rules = blobs[1].Properties.LifecycleConfiguration.Rules as Json[];
    expect(rules).toEqual([{ AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 }, ExpiredObjectDeleteMarker: true, NoncurrentVersionExpiration: { NoncurrentDays: DEFAULT_RETENTION_DAYS }, Status: 'Enabled' }]);
    expect(rules.some((r) => 'ExpirationInDays' in r)).toBe(false);
    expect(blobs[1].DeletionPolicy).toBe('Retain');
  });

  it('refuses requests without TLS', () => {
    const blobs = resources('AWS::S3::Bucket').find(([, r]) => r.Properties.VersioningConfiguration)![0];
    const policy = resources('AWS::S3::BucketPolicy').find(([, r]) => r.Properties.Bucket.Ref === blobs)!;
    expect(policy[1].Properties.PolicyDocument.Statement).toContainEqual(expect.objectContaining({
      Effect: 'Deny', Action: 's3:*', Principal: { AWS: '*' }, Condition: { Bool: { 'aws:SecureTransport': 'false' } },
    }));
  });

  it('keeps old versions as long as the history retention, when that changes', () => {
    const { template: t, stepwise: s } = synthStepwise({ retentionDays: 30 });
    const [, fn] = fnOf('worker', s, t.toJSON());
    expect(fn.Properties.Environment.Variables[RETENTION_DAYS_ENV]).toBe('30');
    t.hasResourceProperties('AWS::S3::Bucket', { LifecycleConfiguration: { Rules: [Match.objectLike({ NoncurrentVersionExpiration: { NoncurrentDays: 30 } })] } });
  });
});

describe('the queues', () => {
  it('are the FIFO queue and dead-letter queue the runtime provisions, with visibility 6x the worker timeout', async () => {
    const { queue, dlq } = await provisioned();
    const [dlqId] = resources('AWS::SQS::Queue').find(([id]) => id.includes('DeadLetterQueue') && !id.includes('Events'))!;
    const [, q] = resources('AWS::SQS::Queue').find(([, r]) => r.Properties.RedrivePolicy)!;
    expect(q.Properties).toMatchObject({
      FifoQueue: true, ContentBasedDeduplication: false, SqsManagedSseEnabled: true,
      DeduplicationScope: queue.Attributes.DeduplicationScope, FifoThroughputLimit: queue.Attributes.FifoThroughputLimit,
      RedrivePolicy: { deadLetterTargetArn: { 'Fn::GetAtt': [dlqId, 'Arn'] }, maxReceiveCount: JSON.parse(queue.Attributes.RedrivePolicy).maxReceiveCount },
      VisibilityTimeout: 6 * 360,
    });
    expect(q.Properties.RedrivePolicy.maxReceiveCount).toBeGreaterThan(DEFAULT_MAX_RECEIVES);
    expect(json.Resources[dlqId].Properties).toMatchObject({ FifoQueue: true, MessageRetentionPeriod: Number(dlq.Attributes.MessageRetentionPeriod), SqsManagedSseEnabled: true });
  });

  it('take a dead-letter queue given in queueProps as theirs: the one the alarm watches and the invariants check, with no other made', () => {
    const { stepwise: s, template: t } = synthStepwise({}, { configure: (stack) => ({ queueProps: { deadLetterQueue: { queue: new sqs.Queue(stack, 'MyDlq', { fifo: true }), maxReceiveCount: 20 } } }) });
    const j = t.toJSON() as Json;
    const myDlq = (s.node.scope as any).resolve((s.deadLetterQueue.node.defaultChild as any).logicalId) as string;
    expect(myDlq).toMatch(/^MyDlq/);
    const queues = Object.entries(j.Resources as Json).filter(([, r]) => r.Type === 'AWS::SQS::Queue').map(([id]) => id);
    expect(queues).toHaveLength(3);
    const watched = Object.values(j.Resources as Json).filter((r) => r.Type === 'AWS::CloudWatch::Alarm' && r.Properties.Namespace === 'AWS/SQS').map((r) => r.Properties.Dimensions[0].Value['Fn::GetAtt'][0]);
    expect(watched).toContain(myDlq);
    expect(() => synthStepwise({}, { configure: (stack) => ({ queueProps: { deadLetterQueue: { queue: new sqs.Queue(stack, 'Standard'), maxReceiveCount: 20 } } }) }))
      .toThrow('the dead-letter queue must be FIFO like the run queue');
    expect(() => synthStepwise({ maxReceiveCount: 20 }, { configure: (stack) => ({ queueProps: { deadLetterQueue: { queue: new sqs.Queue(stack, 'MyDlq', { fifo: true }), maxReceiveCount: 20 } } }) }))
      .toThrow('stepwise: give queueProps.deadLetterQueue or deadLetterQueueProps and maxReceiveCount, not both');
  });

  it('raise an alarm when a message reaches the dead-letter queue', () => {
    const dlqId = logicalIdOf(stepwise.deadLetterQueue as never);
    const alarm = resources('AWS::CloudWatch::Alarm').find(([, r]) => r.Properties.Dimensions?.[0]?.Value?.['Fn::GetAtt']?.[0] === dlqId)!;
    expect(alarm[1].Properties).toMatchObject({
      Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible', Statistic: 'Maximum', Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold', EvaluationPeriods: 1, TreatMissingData: 'notBreaching',
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [dlqId, 'QueueName'] } }],
    });
  });
});

describe('the functions', () => {
  it('run on arm64 and the newest Node runtime Lambda offers, each from its own bundle', () => {
    const newestNode = lambda.Runtime.ALL.filter((r) => r.family === lambda.RuntimeFamily.NODEJS && /^nodejs\d+\.x$/.test(r.name))
      .map((r) => r.name).sort((a, b) => Number(b.match(/\d+/)![0]) - Number(a.match(/\d+/)![0]))[0];
    const fns = resources('AWS::Lambda::Function');
    expect(fns.map(([id]) => id).sort()).toEqual(Object.keys(FUNCTIONS).map((k) => fnOf(k as keyof typeof FUNCTIONS)[0]).sort());
    for (const [, f] of fns) {
      expect(f.Properties).toMatchObject({ Runtime: newestNode, Architectures: ['arm64'], Handler: 'index.handler' });
    }
    // Each its own bundle, with only what that function imports.
    expect(new Set(fns.map(([, f]) => f.Properties.Code.S3Key)).size).toBe(4);
  });

  it('give the worker exactly the settings the runtime reads, by the names in lib/settings.ts, and stamp the code version of the bundle', () => {
    const [, worker] = fnOf('worker');
    const env = worker.Properties.Environment.Variables as Json;
    const ref = (c: { node: { defaultChild?: unknown } }) => ({ Ref: logicalIdOf(c) });
    expect(env).toEqual({
      [TABLE_NAME_ENV]: ref(stepwise.table as never),
      [BUCKET_NAME_ENV]: ref(stepwise.bucket as never),
      [QUEUE_URL_ENV]: ref(stepwise.queue),
      [RETENTION_DAYS_ENV]: String(DEFAULT_RETENTION_DAYS),
      [API_KEY_SECRET_ENV]: ref(stepwise.apiKeySecret as never),
      [SIGNING_KEY_SECRET_ENV]: ref(stepwise.signingKeySecret),
      [EMAIL_FROM_ENV]: 'agent@example.com',
      [MODEL_ENV]: 'claude-haiku-4-5',
      [PUBLIC_URL_ENV]: { 'Fn::GetAtt': [logicalIdOf(stepwise.httpApi), 'ApiEndpoint'] },
      [CODE_VERSION_ENV]: stepwise.codeVersion,
      [DEPLOYMENT_ENV]: { Ref: 'AWS::StackName' },
    });
    const hashes = Object.keys(FUNCTIONS).map((k) => (fnOf(k as keyof typeof FUNCTIONS)[1].Properties.Code.S3Key as string).replace(/\.zip$/, ''));
    expect(stepwise.codeVersion).toBe(`bundle-${createHash('sha256').update(hashes.join('\n')).digest('hex').slice(0, 12)}`);
    expect(worker.Properties).toMatchObject({ MemorySize: 256, Timeout: 360 });
    for (const handler of ['api', 'events', 'sweeper'] as const) {
      expect(fnOf(handler)[1].Properties.Environment.Variables[CODE_VERSION_ENV]).toBe(env[CODE_VERSION_ENV]);
    }
    expect(fnOf('sweeper')[1].Properties.Environment.Variables[STALL_SECONDS_ENV]).toBe('900');
    expect(fnOf('api')[1].Properties.Environment.Variables).not.toHaveProperty(API_KEY_SECRET_ENV);
    // The API prices a run's usage no step records a model for (GET /runs/:id, a fork's or retry's budget) by it, not by the default.
    expect(fnOf('api')[1].Properties.Environment.Variables[MODEL_ENV]).toBe('claude-haiku-4-5');
  });

  it('take the code version from a prop when given, and not when it is empty', () => {
    const { template: t } = synthStepwise({ codeVersion: 'git-abc123' });
    for (const f of Object.values(t.findResources('AWS::Lambda::Function'))) expect(f.Properties.Environment.Variables[CODE_VERSION_ENV]).toBe('git-abc123');
    // An empty one, as `process.env.GIT_SHA ?? ''` gives, is the default: the bundle's hash, not '' in every checkpoint.
    const { template: empty, stepwise: s } = synthStepwise({ codeVersion: '' });
    expect(s.codeVersion).toMatch(/^bundle-[0-9a-f]{12}$/);
    for (const f of Object.values(empty.findResources('AWS::Lambda::Function'))) expect(f.Properties.Environment.Variables[CODE_VERSION_ENV]).toBe(s.codeVersion);
  });

  it('feed the worker from the queue with partial batch responses, one record per invocation by default', () => {
    const [workerId] = fnOf('worker');
    const [, mapping] = only('AWS::Lambda::EventSourceMapping');
    expect(mapping.Properties).toEqual({
      BatchSize: 1, EventSourceArn: { 'Fn::GetAtt': [logicalIdOf(stepwise.queue), 'Arn'] }, FunctionName: { Ref: workerId },
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
  });

  it('write their logs to their own log groups with a retention', () => {
    for (const [, f] of resources('AWS::Lambda::Function')) {
      const group = json.Resources[f.Properties.LoggingConfig.LogGroup.Ref];
      expect(group).toMatchObject({ Type: 'AWS::Logs::LogGroup', Properties: { RetentionInDays: 30 } });
    }
  });
});

describe('the HTTP API', () => {
  it('authorizes every program route with IAM and leaves only the approval pages public', () => {
    const routes = resources('AWS::ApiGatewayV2::Route').map(([, r]) => [r.Properties.RouteKey, r.Properties.AuthorizationType]);
    expect(routes.sort()).toEqual([['$default', 'AWS_IAM'], ['GET /approvals/{token}', 'NONE'], ['POST /approvals/{token}', 'NONE']]);
    const [apiId, api] = only('AWS::ApiGatewayV2::Api');
    expect(api.Properties.ProtocolType).toBe('HTTP');
    const [, integration] = only('AWS::ApiGatewayV2::Integration');
    expect(integration.Properties).toMatchObject({ ApiId: { Ref: apiId }, IntegrationType: 'AWS_PROXY', PayloadFormatVersion: '2.0', IntegrationUri: { 'Fn::GetAtt': [fnOf('api')[0], 'Arn'] } });
  });

  it('throttles its stage and writes access logs that name the route, never the path with its token', () => {
    const [, stage] = only('AWS::ApiGatewayV2::Stage');
    expect(stage.Properties).toMatchObject({ StageName: '$default', AutoDeploy: true, DefaultRouteSettings: { ThrottlingRateLimit: 20, ThrottlingBurstLimit: 40 } });
    const format = stage.Properties.AccessLogSettings.Format as string;
    expect(JSON.parse(format)).toMatchObject({ requestId: '$context.requestId', route: '$context.routeKey', status: '$context.status' });
    expect(format).not.toMatch(/\$context\.path|\$context\.routeKey\.path|rawPath/);
    expect(json.Resources[stage.Properties.AccessLogSettings.DestinationArn['Fn::GetAtt'][0]].Type).toBe('AWS::Logs::LogGroup');
  });
});

describe('events and schedules', () => {
  it('turn the agent\'s startOn triggers and the wait event patterns into rules for the events function, with a dead-letter queue', () => {
    const { template: t, stepwise: s } = synthStepwise({ agentPath: 'test/infra/start-agent.ts', eventPatterns: [{ source: ['billing'], detailType: ['order.paid'] }] });
    const j = t.toJSON();
    const [eventsFn] = fnOf('events', s, j);
    const rules = Object.values(j.Resources as Json).filter((r) => r.Type === 'AWS::Events::Rule' && r.Properties.EventPattern);
    expect(rules.map((r) => r.Properties.EventPattern)).toEqual([
      { source: ['billing'], 'detail-type': ['order.paid'] },
      { source: ['aws.s3'], 'detail-type': ['Object Created'] },
      { 'detail-type': ['invoice.received'] },
    ]);
    const dlq = (s.node.scope as any).resolve((s.eventsDeadLetterQueue.node.defaultChild as any).logicalId);
    for (const rule of rules) {
      expect(rule.Properties.Targets).toEqual([expect.objectContaining({
        Arn: { 'Fn::GetAtt': [eventsFn, 'Arn'] }, DeadLetterConfig: { Arn: { 'Fn::GetAtt': [dlq, 'Arn'] } },
        RetryPolicy: { MaximumRetryAttempts: 8, MaximumEventAgeInSeconds: 86400 },
      })]);
    }
    // An event the function itself fails on lands in the same dead-letter queue.
    t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: eventsFn }, MaximumRetryAttempts: 2,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [dlq, 'Arn'] } } },
    });
    expect(s.agent).toMatchObject({ name: 'starts-on-events', exportName: 'agent' });
  });

  it('refuses a startOn trigger that would match every event', () => {
    expect(() => synthStepwise({ agentPath: 'test/infra/match-all-agent.ts' })).toThrow(/names neither a source nor a detail type/);
  });

  it('run the sweeper every 5 minutes', () => {
    const rules = resources('AWS::Events::Rule').filter(([, r]) => r.Properties.ScheduleExpression);
    expect(rules).toHaveLength(1);
    expect(rules[0]![1].Properties).toMatchObject({ ScheduleExpression: 'rate(5 minutes)', Targets: [{ Arn: { 'Fn::GetAtt': [fnOf('sweeper')[0], 'Arn'] } }] });
  });
});

describe('secrets and email', () => {
  it('limit sending email to the configured sender, as its address or its domain, for the worker only', () => {
    const statements = policyStatements();
    const ses = statements.filter((s) => [s.statement.Action].flat().some((a: string) => a.startsWith('ses:')));
    expect(ses).toHaveLength(1);
    expect(ses[0]!.role).toBe(logicalIdOf(stepwise.workerFunction.role as never));
    expect(ses[0]!.statement).toEqual({
      Action: 'ses:SendEmail', Effect: 'Allow',
      Resource: ['arn:aws:ses:us-east-1:123456789012:identity/agent@example.com', 'arn:aws:ses:us-east-1:123456789012:identity/example.com'],
      Condition: { StringEquals: { 'ses:FromAddress': 'agent@example.com' } },
    });
  });

  it('refuse a publicUrl the worker would refuse when it wires up (every step would fail), and take an empty one as the default', () => {
    for (const publicUrl of ['agent.example.com/approve', 'ftp://example.com', 'not a url']) {
      expect(() => synthStepwise({ publicUrl }), publicUrl).toThrow(`stepwise: publicUrl must be the http:// or https:// address approval links point at, got ${JSON.stringify(publicUrl)}`);
    }
    const linkBase = (publicUrl: string) => {
      const { stepwise: s, template: t } = synthStepwise({ publicUrl });
      return fnOf('worker', s, t.toJSON())[1].Properties.Environment.Variables[PUBLIC_URL_ENV];
    };
    expect(linkBase('https://agent.example.com')).toBe('https://agent.example.com');
    expect(linkBase('')).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^StepwiseHttpApi/), 'ApiEndpoint'] });
  });

  it('refuse a sender that is not an email address', () => {
    for (const emailFrom of ['not-an-email', 'agent@localhost', 'a b@example.com']) {
      expect(() => synthStepwise({ emailFrom }), emailFrom).toThrow(`stepwise: emailFrom must be an email address (the verified SES sender), got ${JSON.stringify(emailFrom)}`);
    }
  });

  it('limit it to the sender given as a deploy parameter, its domain split out by CloudFormation', () => {
    const app = new App({ outdir: tempDir('stepwise-cdk-'), context: { ...cdkContext(), '@aws-cdk/core:validateAgainstDefaultRules': false, 'aws:cdk:bundling-stacks': [] } });
    const stack = new StepwiseStack(app, 'Params', { agentPath: 'examples/aws/agent.ts' });
    const policies = Template.fromStack(stack).findResources('AWS::IAM::Policy');
    const ses = Object.values(policies).flatMap((p) => p.Properties.PolicyDocument.Statement as Json[]).filter((st) => st.Action === 'ses:SendEmail');
    expect(ses).toHaveLength(1);
    expect(ses[0]!.Condition).toEqual({ StringEquals: { 'ses:FromAddress': { Ref: 'SenderEmail' } } });
    expect(JSON.stringify(ses[0]!.Resource)).toContain('{"Fn::Select":[1,{"Fn::Split":["@",{"Ref":"SenderEmail"}]}]}');
  });

  it('keep the Anthropic key and the signing key in Secrets Manager, readable by the functions that use them only', () => {
    const keyId = logicalIdOf(stepwise.apiKeySecret as never);
    const signingId = logicalIdOf(stepwise.signingKeySecret);
    expect(json.Resources[signingId].Properties.GenerateSecretString).toEqual({ PasswordLength: 64, ExcludePunctuation: true, IncludeSpace: false });
    const readers = (id: string) => policyStatements().filter((s) => [s.statement.Resource].flat().some((r: Json) => r?.Ref === id)).map((s) => s.role).sort();
    expect(readers(keyId)).toEqual([logicalIdOf(stepwise.workerFunction.role as never)]);
    expect(readers(signingId)).toEqual([logicalIdOf(stepwise.apiFunction.role as never), logicalIdOf(stepwise.workerFunction.role as never)].sort());
  });
});

describe('IAM', () => {
  it('scopes every statement to this stack\'s own resources: no "*" resource, only the blobs/ prefix of the bucket', () => {
    const own = new Set(Object.keys(json.Resources));
    const refersToOwn = (value: unknown): boolean => {
      if (typeof value === 'string') return false;
      const v = value as Json;
      if (v.Ref) return own.has(v.Ref);
      if (v['Fn::GetAtt']) return own.has(v['Fn::GetAtt'][0]);
      if (v['Fn::Join']) return (v['Fn::Join'][1] as unknown[]).some(refersToOwn);
      return false;
    };
    const sesIdentity = /^arn:aws:ses:us-east-1:123456789012:identity\/(agent@example\.com|example\.com)$/;
    const statements = policyStatements();
    expect(statements.length).toBeGreaterThan(10);
    for (const { statement } of statements) {
      for (const resource of [statement.Resource].flat()) {
        expect(resource).not.toBe('*');
        if (typeof resource === 'string') expect(resource).toMatch(sesIdentity);
        else expect(refersToOwn(resource), JSON.stringify(resource)).toBe(true);
        const wildcard = JSON.stringify(resource).includes('*');
        if (wildcard) expect(resource['Fn::Join'][1]).toEqual([{ 'Fn::GetAtt': [logicalIdOf(stepwise.bucket as never), 'Arn'] }, '/blobs/*']);
      }
      for (const action of [statement.Action].flat()) expect(action).not.toMatch(/\*/);
    }
    for (const [, role] of resources('AWS::IAM::Role')) expect(role.Properties.ManagedPolicyArns).toBeUndefined();
  });

  it('lets the API, alone, delete items in batches, on the table alone (DELETE /runs/:id)', () => {
    const batch = policyStatements().filter((s) => [s.statement.Action].flat().includes('dynamodb:BatchWriteItem'));
    expect(batch.map((s) => s.role)).toEqual([logicalIdOf(stepwise.apiFunction.role as never)]);
    expect(batch[0]!.statement.Resource).toEqual({ 'Fn::GetAtt': [logicalIdOf(stepwise.table as never), 'Arn'] });
  });

  it('lets the sweeper only query the two indexes and send messages', () => {
    const sweeper = policyStatements().filter((s) => s.role === logicalIdOf(stepwise.sweeperFunction.role as never)).map((s) => s.statement.Action).flat().sort();
    expect(sweeper).toEqual(['dynamodb:Query', 'logs:CreateLogStream', 'logs:PutLogEvents', 'sqs:SendMessage']);
  });
});

describe('customer-managed keys', () => {
  it('let every function that touches a table, queue or bucket under a customer-managed key use that key', () => {
    const { stepwise: s, template: t } = synthStepwise({
      dynamoTableProps: { encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED },
      queueProps: { encryption: sqs.QueueEncryption.KMS },
      bucketProps: { encryption: s3.BucketEncryption.KMS },
    });
    const j = t.toJSON() as Json;
    const resolve = (c: { node: { defaultChild?: unknown } }) => (s.node.scope as any).resolve((c.node.defaultChild as any).logicalId) as string;
    const keyOf = { table: s.table.encryptionKey!, queue: s.queue.encryptionMasterKey!, bucket: s.bucket.encryptionKey! };
    const keyIds = Object.fromEntries(Object.entries(keyOf).map(([name, key]) => [name, resolve(key as never)]));
    expect(new Set(Object.values(keyIds)).size).toBe(3);
    /** The KMS actions a function's role has on a key. */
    const actionsOn = (fn: keyof typeof FUNCTIONS, keyId: string) => (Object.values(j.Resources) as Json[])
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles[0].Ref === resolve(s[FUNCTIONS[fn]].role as never))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Json[])
      .filter((st) => [st.Resource].flat().some((r: Json) => r?.['Fn::GetAtt']?.[0] === keyId))
      .flatMap((st) => [st.Action].flat()).sort();
    const readWrite = ['kms:Decrypt', 'kms:DescribeKey', 'kms:Encrypt', 'kms:GenerateDataKey'];
    for (const fn of ['worker', 'api', 'events', 'sweeper'] as const) {
      expect(actionsOn(fn, keyIds.table!), `${fn} on the table's key`).toEqual(readWrite);
      // The worker's event source adds its own kms:Decrypt on the queue's key.
      expect([...new Set(actionsOn(fn, keyIds.queue!))], `${fn} on the queue's key`).toEqual(readWrite);
      expect(actionsOn(fn, keyIds.bucket!), `${fn} on the bucket's key`).toEqual(fn === 'sweeper' ? [] : readWrite);
    }
  });

  it('put blobs under the bucket\'s customer-managed key, as the runtime puts them only under a key it is given', () => {
    // S3BlobStore names SSE-S3 on every put unless STEPWISE_KMS_KEY_ID is set, and a named encryption wins
    // over the bucket's default: the functions that put blobs need the key itself.
    const blobKeys = (s: Stepwise, j: Json) => (['worker', 'api', 'events'] as const).map((fn) => fnOf(fn, s, j)[1].Properties.Environment.Variables[KMS_KEY_ID_ENV]);
    const { stepwise: s, template: t } = synthStepwise({ bucketProps: { encryption: s3.BucketEncryption.KMS } });
    const keyId = (s.node.scope as any).resolve((s.bucket.encryptionKey!.node.defaultChild as any).logicalId) as string;
    expect(blobKeys(s, t.toJSON())).toEqual(Array(3).fill({ 'Fn::GetAtt': [keyId, 'Arn'] }));
    expect(blobKeys(stepwise, json)).toEqual(Array(3).fill(undefined));
  });

  it('need no key grant under the default encryption', () => {
    expect(JSON.stringify(json)).not.toContain('kms:');
  });
});

describe('metrics, alarms and the dashboard', () => {
  it('alarm on failed runs from the worker\'s EMF metric, with the dimensions Powertools writes', () => {
    const alarm = resources('AWS::CloudWatch::Alarm').find(([, r]) => r.Properties.MetricName === METRIC_NAMES.runsFailed)!;
    expect(alarm[1].Properties).toMatchObject({
      Namespace: METRICS_NAMESPACE, Statistic: 'Sum', Threshold: 1,
      Dimensions: expect.arrayContaining([{ Name: 'service', Value: METRICS_SERVICE }, { Name: METRICS_AGENT_DIMENSION, Value: 'fixture-echo' }]),
    });
    // The deployment's too, as the worker writes it: two stacks of one agent keep their metrics apart.
    const deployment = { Ref: 'AWS::StackName' };
    expect(alarm[1].Properties.Dimensions).toContainEqual({ Name: METRICS_DEPLOYMENT_DIMENSION, Value: deployment });
    const worker = resources('AWS::Lambda::Function').find(([, r]) => String(r.Properties.Description ?? '').includes('one step of a run per queue message'))!;
    expect(worker[1].Properties.Environment.Variables[DEPLOYMENT_ENV]).toEqual(deployment);
    const names = resources('AWS::CloudWatch::Alarm').map(([, r]) => r.Properties.MetricName ?? '').sort();
    expect(names).toEqual(['5xx', 'ApproximateNumberOfMessagesVisible', 'ApproximateNumberOfMessagesVisible', 'Errors', 'Errors', METRIC_NAMES.runsFailed].sort());
  });

  it('show every worker metric on the dashboard', () => {
    const [, dashboard] = only('AWS::CloudWatch::Dashboard');
    // The body is JSON joined with references: put a placeholder where each reference goes.
    const parts = dashboard.Properties.DashboardBody['Fn::Join'][1] as unknown[];
    const body = JSON.parse(parts.map((p) => (typeof p === 'string' ? p : 'ref')).join('')) as { widgets: { properties: { metrics?: unknown[][] } }[] };
    const shown = body.widgets.flatMap((w) => w.properties.metrics ?? []).filter((m) => m[0] === METRICS_NAMESPACE);
    for (const name of Object.values(METRIC_NAMES)) {
      expect(shown.find((m) => m[1] === name), name).toEqual(expect.arrayContaining([METRICS_AGENT_DIMENSION, 'fixture-echo', 'service', METRICS_SERVICE, METRICS_DEPLOYMENT_DIMENSION, 'ref']));
    }
  });
});

describe('stack outputs', () => {
  it('are named as the CLI\'s --stack reads them', () => {
    const { stack, stepwise: s, template: t } = synthStepwise({}, { after: (c) => c.addStackOutputs() });
    const outputs = t.toJSON().Outputs as Json;
    expect(Object.keys(outputs).sort()).toEqual(['AgentNames', 'ApiUrl', 'BucketName', 'QueueUrl', 'TableName']);
    // Which agent's workers read the queue, so the CLI sends it only that agent's runs.
    expect(JSON.parse(outputs.AgentNames.Value)).toEqual(['fixture-echo']);
    expect(outputs.QueueUrl.Value).toEqual({ Ref: (stack as any).resolve((s.queue.node.defaultChild as any).logicalId) });
  });

  it('are one agent\'s per stack: a second construct asking for them is told why, not CDK\'s name clash', () => {
    expect(() => synthStepwise({}, {
      after: (first) => {
        first.addStackOutputs();
        new Stepwise(Stack.of(first), 'Second', { agentPath: FIXTURE_AGENT }).addStackOutputs();
      },
    })).toThrow(/^stepwise: stack Test already has the stack outputs `stepwise --stack` reads \(TableName, QueueUrl, \.\.\.\), so Test\/Second cannot add its own: they are one agent's per stack/);
  });
});

describe('overrides that keep the invariants', () => {
  it('follow a longer worker timeout with the queue visibility', () => {
    const { template: t } = synthStepwise({ workerFunctionProps: { timeout: Duration.minutes(10), memorySize: 512 } });
    t.hasResourceProperties('AWS::SQS::Queue', { FifoQueue: true, VisibilityTimeout: 3600, RedrivePolicy: Match.anyValue() });
    t.hasResourceProperties('AWS::Lambda::Function', { Description: Match.stringLikeRegexp('one step of a run'), Timeout: 600, MemorySize: 512 });
    // And the sweeper's stall window stays longer than a step can last.
    t.hasResourceProperties('AWS::Lambda::Function', { Description: Match.stringLikeRegexp('re-drives'), Environment: { Variables: Match.objectLike({ [STALL_SECONDS_ENV]: '900' }) } });
    const { template: longest } = synthStepwise({ workerFunctionProps: { timeout: Duration.minutes(15) } });
    longest.hasResourceProperties('AWS::Lambda::Function', { Description: Match.stringLikeRegexp('re-drives'), Environment: { Variables: Match.objectLike({ [STALL_SECONDS_ENV]: '960' }) } });
  });
});

function policyStatements(): { role: string; statement: Json }[] {
  return resources('AWS::IAM::Policy').flatMap(([, p]) => (p.Properties.PolicyDocument.Statement as Json[]).map((statement) => ({ role: p.Properties.Roles[0].Ref as string, statement })));
}
