import { Duration } from 'aws-cdk-lib';
import type * as apigwv2 from 'aws-cdk-lib/aws-apigatewayv2';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { METRIC_NAMES, METRICS_AGENT_DIMENSION, METRICS_DEPLOYMENT_DIMENSION, METRICS_NAMESPACE, METRICS_SERVICE } from '../lib/settings.ts';

export interface StepwiseObservabilityProps {
  agentName: string;
  /** The deployment's name, as the worker puts it on its metrics (STEPWISE_DEPLOYMENT). */
  deployment: string;
  worker: lambda.IFunction;
  api: lambda.IFunction;
  events: lambda.IFunction;
  sweeper: lambda.IFunction;
  queue: sqs.IQueue;
  deadLetterQueue: sqs.IQueue;
  eventsDeadLetterQueue: sqs.IQueue;
  httpApi: apigwv2.HttpApi;
  alarmActions?: cloudwatch.IAlarmAction[];
}

/**
 * Alarms for what needs a person (a message in a dead-letter queue, a failed run, functions that throw,
 * API errors) and one dashboard of the worker's metrics (functions/metrics.ts) beside the AWS ones.
 */
export class StepwiseObservability extends Construct {
  readonly alarms: {
    deadLetterQueue: cloudwatch.Alarm;
    eventsDeadLetterQueue: cloudwatch.Alarm;
    runsFailed: cloudwatch.Alarm;
    workerErrors: cloudwatch.Alarm;
    sweeperErrors: cloudwatch.Alarm;
    apiServerErrors: cloudwatch.Alarm;
  };
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: StepwiseObservabilityProps) {
    super(scope, id);
    const period = Duration.minutes(5);
    const metric = (name: string, statistic = 'Sum') => new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE, metricName: name, statistic, period,
      dimensionsMap: { service: METRICS_SERVICE, [METRICS_AGENT_DIMENSION]: props.agentName, [METRICS_DEPLOYMENT_DIMENSION]: props.deployment },
    });
    const alarm = (alarmId: string, m: cloudwatch.IMetric, description: string) => {
      const a = new cloudwatch.Alarm(this, alarmId, {
        metric: m, threshold: 1, evaluationPeriods: 1, alarmDescription: `stepwise ${props.agentName}: ${description}`,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
      for (const action of props.alarmActions ?? []) a.addAlarmAction(action);
      return a;
    };
    const visible = (q: sqs.IQueue) => q.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' });
    this.alarms = {
      deadLetterQueue: alarm('DeadLetterQueueDepth', visible(props.deadLetterQueue),
        'a run message reached the dead-letter queue (its deliveries never reached the step); the sweeper re-drives its run, look at the worker logs for why'),
      eventsDeadLetterQueue: alarm('EventsDeadLetterQueueDepth', visible(props.eventsDeadLetterQueue),
        'an event could not be delivered to the events function after EventBridge retries: a run was not started or a wait not resumed'),
      runsFailed: alarm('RunsFailed', metric(METRIC_NAMES.runsFailed), 'a run failed (its reason is on the run: stepwise status <runId>)'),
      workerErrors: alarm('WorkerErrors', props.worker.metricErrors({ period }), 'the worker function threw (wiring, configuration): its messages are retried until fixed'),
      sweeperErrors: alarm('SweeperErrors', props.sweeper.metricErrors({ period }), 'the sweeper function threw: stalled runs and due wait timers wait for the next good sweep'),
      apiServerErrors: alarm('ApiServerErrors', props.httpApi.metricServerError({ period, statistic: 'Sum' }), 'the HTTP API answered with 5xx'),
    };

    const w = (title: string, left: cloudwatch.IMetric[], right: cloudwatch.IMetric[] = []) =>
      new cloudwatch.GraphWidget({ title, left, right, width: 12, height: 6 });
    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      defaultInterval: Duration.hours(6),
      widgets: [
        [new cloudwatch.AlarmStatusWidget({ title: 'Alarms', alarms: Object.values(this.alarms), width: 24, height: 3 })],
        [
          w('Steps and runs', [metric(METRIC_NAMES.steps), metric(METRIC_NAMES.runsCompleted), metric(METRIC_NAMES.runsFailed)], [metric(METRIC_NAMES.failedAttempts)]),
          w('Model tokens and estimated cost (USD)', [metric(METRIC_NAMES.inputTokens), metric(METRIC_NAMES.outputTokens), metric(METRIC_NAMES.cacheReadTokens), metric(METRIC_NAMES.cacheWriteTokens)], [metric(METRIC_NAMES.modelCostUsd)]),
        ],
        [
          w('Worker duration (a step is mostly the model call)', [props.worker.metricDuration({ statistic: 'p50', period }), props.worker.metricDuration({ statistic: 'p90', period }), props.worker.metricDuration({ statistic: 'Maximum', period })]),
          w('Checkpoint bytes', [metric(METRIC_NAMES.checkpointBytes, 'Average'), metric(METRIC_NAMES.checkpointBytes, 'Maximum')]),
        ],
        [
          w('Queues', [props.queue.metricApproximateNumberOfMessagesVisible({ period }), props.queue.metricApproximateNumberOfMessagesNotVisible({ period })], [visible(props.deadLetterQueue), visible(props.eventsDeadLetterQueue)]),
          w('Functions: invocations and errors', [props.worker.metricInvocations({ period }), props.events.metricInvocations({ period }), props.api.metricInvocations({ period })],
            [props.worker.metricErrors({ period }), props.events.metricErrors({ period }), props.api.metricErrors({ period }), props.sweeper.metricErrors({ period }), props.worker.metricThrottles({ period })]),
        ],
        [w('HTTP API', [props.httpApi.metricCount({ period })], [props.httpApi.metricClientError({ period }), props.httpApi.metricServerError({ period })])],
      ],
    });
  }
}
