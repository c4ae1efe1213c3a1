import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { StepwiseStack } from './stepwise-stack.ts';

/**
 * The project's own CDK app (`npm run synth`, `npx cdk deploy`): the release-notes example agent. Every
 * synth runs cdk-nag's AwsSolutions pack; an unacknowledged finding fails it.
 */
const app = new App();
new StepwiseStack(app, app.node.tryGetContext('stackName') ?? 'Stepwise', {
  agentPath: app.node.tryGetContext('agent') ?? 'examples/aws/agent.ts',
  description: 'stepwise: checkpointed LLM agent runs (table, bucket, FIFO queue, worker, HTTP API, events, sweeper)',
});
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
