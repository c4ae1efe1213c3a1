import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Handled } from '../lib/engine/handle-message.ts';
import { stepMetrics } from '../lib/aws/step-metrics.ts';
import { DEPLOYMENT_ENV, METRICS_AGENT_DIMENSION, METRICS_DEPLOYMENT_DIMENSION, METRICS_NAMESPACE, METRICS_SERVICE } from '../lib/settings.ts';

export interface WorkerMetrics {
  record(handled: Handled): void;
  /** Writes the invocation's metrics as one EMF line on stdout, which CloudWatch Logs turns into metrics. */
  publish(): void;
}

/**
 * The worker's CloudWatch metrics (lib/aws/step-metrics.ts) through Powertools' EMF output, in Lambda only:
 * elsewhere (tests, a worker run from the CLI) stdout is not a metrics channel, and nothing is written.
 */
export function workerMetrics(agentName: string, fallbackModel: string, env: NodeJS.ProcessEnv = process.env): WorkerMetrics | undefined {
  if (!env.AWS_LAMBDA_FUNCTION_NAME) return undefined;
  const deployment = env[DEPLOYMENT_ENV]?.trim();
  const metrics = new Metrics({
    namespace: METRICS_NAMESPACE, serviceName: METRICS_SERVICE,
    defaultDimensions: { [METRICS_AGENT_DIMENSION]: agentName, ...(deployment ? { [METRICS_DEPLOYMENT_DIMENSION]: deployment } : {}) },
  });
  return {
    record: (handled) => {
      for (const point of stepMetrics(handled, fallbackModel)) metrics.addMetric(point.name, point.unit, point.value);
    },
    publish: () => {
      if (metrics.hasStoredMetrics()) metrics.publishStoredMetrics();
    },
  };
}
