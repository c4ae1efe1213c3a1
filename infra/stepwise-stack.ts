import { CfnOutput, CfnParameter, Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { Stepwise, type StepwiseProps } from './stepwise-construct.ts';

export interface StepwiseStackProps extends StackProps {
  readonly agentPath: string;
  /** Anything else for the construct (the sender and approver come from the stack's parameters). */
  readonly stepwise?: Omit<Partial<StepwiseProps>, 'agentPath' | 'emailFrom'>;
}

/**
 * One agent's deployment as a stack of its own, with the outputs the `stepwise` CLI reads (`--stack`).
 * Deploy parameters: SenderEmail (a verified SES identity, the From of approval emails) and
 * ApproverEmail (handed to the agent as STEPWISE_APPROVER).
 */
export class StepwiseStack extends Stack {
  readonly stepwise: Stepwise;

  constructor(scope: Construct, id: string, props: StepwiseStackProps) {
    super(scope, id, props);
    const sender = new CfnParameter(this, 'SenderEmail', {
      type: 'String', allowedPattern: '^[^@\\s]+@[^@\\s]+$',
      description: 'The verified SES identity (address, or an address of a verified domain) approval emails come from',
    });
    const approver = new CfnParameter(this, 'ApproverEmail', {
      type: 'String', allowedPattern: '^[^@\\s]+@[^@\\s]+$',
      description: 'Who is asked to approve (the agent reads it as STEPWISE_APPROVER)',
    });
    this.stepwise = new Stepwise(this, 'Stepwise', {
      ...props.stepwise,
      agentPath: props.agentPath,
      emailFrom: sender.valueAsString,
      workerFunctionProps: {
        ...props.stepwise?.workerFunctionProps,
        environment: { ...props.stepwise?.workerFunctionProps?.environment, STEPWISE_APPROVER: approver.valueAsString },
      },
    });
    this.stepwise.addStackOutputs();
    new CfnOutput(this, 'ApiKeySecretArn', { value: this.stepwise.apiKeySecret.secretArn, description: 'Put the Anthropic API key in this secret' });
  }
}
