import { CfnParameter, Duration, type Stack } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import * as sqsLib from 'aws-cdk-lib/aws-sqs';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { Annotations, Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DEFAULT_DEADLINE_MS, DEFAULT_MAX_RECEIVES, DEFAULT_RESERVE_MS } from '../../lib/settings.ts';
import { MIN_WORKER_TIMEOUT_SECONDS } from '../../infra/invariants.ts';
import { Stepwise, type StepwiseProps } from '../../infra/stepwise-construct.ts';
import { synthStepwise } from './synth-support.ts';

/**
 * The runtime's safety settings are the construct's invariants: an override that breaks one fails the
 * synth, and says why.
 */

describe('overrides that break an invariant fail the synth with the reason', () => {
  it('a worker timeout below the model deadline plus the reserve', () => {
    expect(MIN_WORKER_TIMEOUT_SECONDS).toBe((DEFAULT_DEADLINE_MS + DEFAULT_RESERVE_MS) / 1000);
    expect(() => synthStepwise({ workerFunctionProps: { timeout: Duration.seconds(60) } }))
      .toThrow(`the worker timeout (60 s) must be at least ${MIN_WORKER_TIMEOUT_SECONDS} s: the model's retry deadline (300 s)`);
    expect(() => synthStepwise({ workerFunctionProps: { timeout: Duration.seconds(MIN_WORKER_TIMEOUT_SECONDS) } })).not.toThrow();
  });

  it('a worker timeout past Lambda\'s longest, or a standard dead-letter queue under the FIFO run queue: deploys that would fail', () => {
    expect(() => synthStepwise({ workerFunctionProps: { timeout: Duration.minutes(20) } }))
      .toThrow('the worker timeout (1200 s) must be at most 900 s, the longest Lambda allows: the deploy would fail');
    expect(() => synthStepwise({ workerFunctionProps: { timeout: Duration.minutes(15) } })).not.toThrow();
    expect(() => synthStepwise({ deadLetterQueueProps: { fifo: false } }))
      .toThrow('the dead-letter queue must be FIFO like the run queue: SQS refuses a redrive policy from a FIFO queue to a standard one');
  });

  it('numbers CloudFormation would refuse at deploy: memory, receive count, batch size, concurrency, retention, API throttling', () => {
    for (const memorySize of [-1, 64, 20_000, 256.5]) {
      expect(() => synthStepwise({ workerFunctionProps: { memorySize } }), String(memorySize))
        .toThrow(`the worker's memory size (${memorySize} MB) must be a whole number of MB from 128 to 10240, what Lambda allows: the deploy would fail`);
    }
    expect(() => synthStepwise({ workerFunctionProps: { memorySize: 10_240 } })).not.toThrow();
    for (const maxReceiveCount of [1001, 12.5]) {
      expect(() => synthStepwise({ maxReceiveCount }), String(maxReceiveCount))
        .toThrow(`the dead-letter queue's receive count (${maxReceiveCount}) must be a whole number up to 1000, the most SQS allows`);
    }
    expect(() => synthStepwise({ sqsEventSourceProps: { batchSize: 2.5 } })).toThrow('the batch size (2.5) must be a whole number between 1 and 10');
    expect(() => synthStepwise({ workerFunctionProps: { reservedConcurrentExecutions: -1 } })).toThrow("the worker's reserved concurrency (-1) must be a whole number, 0 or more");
    expect(() => synthStepwise({ sqsEventSourceProps: { maxConcurrency: 2.5 } })).toThrow("the event source's maximum concurrency (2.5) must be a whole number");
    expect(() => synthStepwise({ retentionDays: 1.5 })).toThrow('the checkpoint history retention must be a positive whole number of days, got 1.5');
    expect(() => synthStepwise({ apiThrottle: { rateLimit: -1, burstLimit: 40 } })).toThrow('stepwise: apiThrottle.rateLimit must be a number of requests per second, 0 or more, got -1');
    expect(() => synthStepwise({ apiThrottle: { rateLimit: 10, burstLimit: 2.5 } })).toThrow('stepwise: apiThrottle.burstLimit must be a whole number of requests, 0 or more, got 2.5');
  });

  it('an event source allowed more concurrency than the worker has reserved, so its records are throttled', () => {
    expect(() => synthStepwise({ workerFunctionProps: { reservedConcurrentExecutions: 5 }, sqsEventSourceProps: { maxConcurrency: 10 } }))
      .toThrow("the event source's maximum concurrency (10) must not be above the worker's reserved concurrency (5)");
    expect(() => synthStepwise({ workerFunctionProps: { reservedConcurrentExecutions: 10 }, sqsEventSourceProps: { maxConcurrency: 10 } })).not.toThrow();
  });

  it('a visibility timeout under 6x the worker timeout', () => {
    expect(() => synthStepwise({ queueProps: { visibilityTimeout: Duration.minutes(30) } }))
      .toThrow("the queue's visibility timeout (1800 s) must be at least 6x the worker timeout (2160 s): a message that becomes visible while its step still runs");
  });

  it('a dead-letter receive count at or below the engine\'s crash-loop limit', () => {
    expect(() => synthStepwise({ maxReceiveCount: DEFAULT_MAX_RECEIVES }))
      .toThrow(`the dead-letter queue's receive count (${DEFAULT_MAX_RECEIVES}) must be above the engine's crash-loop limit (${DEFAULT_MAX_RECEIVES} tries)`);
    expect(() => synthStepwise({ maxReceiveCount: DEFAULT_MAX_RECEIVES + 1 })).not.toThrow();
  });

  it('partial batch responses turned off', () => {
    expect(() => synthStepwise({ sqsEventSourceProps: { reportBatchItemFailures: false } }))
      .toThrow("the worker's SQS event source must report batch item failures (ReportBatchItemFailures)");
  });

  it('TTL on another attribute, or none', () => {
    expect(() => synthStepwise({ dynamoTableProps: { timeToLiveAttribute: 'ttl' } }))
      .toThrow(`the table's time to live must be on "expiresAt", the attribute the runtime writes on history rows, kept events and finished wait keys; got "ttl"`);
    expect(() => synthStepwise({ dynamoTableProps: { timeToLiveAttribute: undefined } })).toThrow(/time to live must be on "expiresAt".*got none/);
  });

  it('another table key', () => {
    expect(() => synthStepwise({ dynamoTableProps: { partitionKey: { name: 'id', type: dynamodb.AttributeType.STRING } } }))
      .toThrow("the table's key must be pk (partition) and sk (sort)");
  });

  it('a standard queue', () => {
    expect(() => synthStepwise({ queueProps: { fifo: false } })).toThrow('the run queue must be a FIFO queue');
  });

  it('a batch larger than a FIFO event source takes, a sweep too rare for the wait timers, a stall window inside a step', () => {
    expect(() => synthStepwise({ sqsEventSourceProps: { batchSize: 11 } })).toThrow(/batch size/);
    expect(() => synthStepwise({ sweepInterval: Duration.minutes(15) })).toThrow('the sweeper must run more often than every 15 minutes');
    expect(() => synthStepwise({ stallAfter: Duration.minutes(5) })).toThrow("the sweeper's stall window (300 s) must be longer than the worker timeout (360 s)");
  });

  it('a worker timeout given as a deploy-time parameter, which cannot be checked', () => {
    expect(() => synthStepwise({}, {
      configure: (stack) => ({ queueProps: { visibilityTimeout: Duration.seconds(new CfnParameter(stack, 'Vis', { type: 'Number' }).valueAsNumber) } }),
    })).toThrow("the queue's visibility timeout must be a concrete number at synth time");
  });

  it('an existing queue of the app without a dead-letter queue, or with a bad one; an existing table of the app with the wrong TTL', () => {
    expect(() => synthStepwise({}, { configure: (stack) => ({ existingQueueObj: new sqsLib.Queue(stack, 'Mine', { fifo: true, visibilityTimeout: Duration.hours(1) }) }) }))
      .toThrow(/has no dead-letter queue/);
    expect(() => synthStepwise({}, {
      configure: (stack) => {
        const dlq = new sqsLib.Queue(stack, 'MineDlq', { fifo: true });
        return { existingQueueObj: new sqsLib.Queue(stack, 'Mine', { fifo: true, visibilityTimeout: Duration.hours(1), deadLetterQueue: { queue: dlq, maxReceiveCount: 3 } }) };
      },
    })).toThrow("the dead-letter queue's receive count (3) must be above");
    expect(() => synthStepwise({}, {
      configure: (stack) => ({
        existingTableObj: new dynamodb.Table(stack, 'Shared', {
          partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING }, sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
          billingMode: dynamodb.BillingMode.PAY_PER_REQUEST, timeToLiveAttribute: 'ttl',
        }),
      }),
    })).toThrow(/time to live must be on "expiresAt".*needs the global secondary index by-status/);
  });

  it('a change made through an escape hatch after the construct was built', () => {
    const attempt = (change: (s: Stepwise) => void) => () => synthStepwise({}, { after: change });
    expect(attempt((s) => { (s.queue.node.defaultChild as sqs.CfnQueue).visibilityTimeout = 60; }))
      .toThrow(/visibility timeout \(60 s\) must be at least 6x the worker timeout/);
    expect(attempt((s) => {
      const mapping = s.workerFunction.node.findAll().find((c) => (c as { cfnResourceType?: string }).cfnResourceType === 'AWS::Lambda::EventSourceMapping') as lambda.CfnEventSourceMapping;
      mapping.functionResponseTypes = [];
    })).toThrow(/must report batch item failures/);
    expect(attempt((s) => { (s.workerFunction.node.defaultChild as lambda.CfnFunction).timeout = 30; }))
      .toThrow(/the worker timeout \(30 s\) must be at least 315 s/);
  });
});

describe('resources shared between agents', () => {
  it('a second agent on the first one\'s table and bucket, with its own queue and worker', () => {
    const { template, stepwise } = synthStepwise({}, {
      configure: (stack) => {
        const first = new Stepwise(stack, 'First', { agentPath: 'test/infra/start-agent.ts' });
        return { existingTableObj: first.table, existingBucketObj: first.bucket };
      },
    });
    template.resourceCountIs('AWS::DynamoDB::Table', 1);
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', 2);
    expect(stepwise.loggingBucket).toBeUndefined();
  });

  it('refuses settings of a resource the construct would make beside the existing one given, which they would not apply to', () => {
    const withQueue = (stack: Stack) => {
      const dlq = new sqsLib.Queue(stack, 'MineDlq', { fifo: true });
      return { existingQueueObj: new sqsLib.Queue(stack, 'Mine', { fifo: true, visibilityTimeout: Duration.hours(1), deadLetterQueue: { queue: dlq, maxReceiveCount: 15 } }) };
    };
    const withBucket = (stack: Stack) => ({ existingBucketObj: new s3.Bucket(stack, 'MineBucket') });
    const cases: [Partial<StepwiseProps>, (stack: Stack) => Partial<StepwiseProps>, string][] = [
      [{ maxReceiveCount: 20 }, withQueue, 'give existingQueueObj or maxReceiveCount, not both'],
      [{ deadLetterQueueProps: {} }, withQueue, 'give existingQueueObj or deadLetterQueueProps, not both'],
      [{ bucketProps: {} }, withBucket, 'give existingBucketObj or bucketProps, not both'],
      [{ loggingBucketProps: {} }, withBucket, 'give existingBucketObj or loggingBucketProps, not both'],
      [{ logS3AccessLogs: true }, withBucket, 'give existingBucketObj or logS3AccessLogs, not both'],
    ];
    for (const [props, configure, message] of cases) {
      expect(() => synthStepwise(props, { configure }), message).toThrow(`stepwise: ${message} (the props would not apply to an existing resource)`);
    }
    expect(() => synthStepwise({}, { configure: (stack) => ({ ...withQueue(stack), ...withBucket(stack) }) })).not.toThrow();
  });

  it('warns that an imported table cannot be checked', () => {
    const { template, stack } = synthStepwise({}, { configure: (s) => ({ existingTableObj: dynamodb.Table.fromTableName(s, 'Imported', 'stepwise-runs') }) });
    template.resourceCountIs('AWS::DynamoDB::Table', 0);
    Annotations.fromStack(stack).hasWarning('/Test/Stepwise', Match.stringLikeRegexp('Test/Imported is not defined in this app: make sure its key is pk/sk, its TTL is on expiresAt'));
  });
});
