/**
 * `stepwise/cdk`: the CDK construct that deploys an agent (infra/stepwise-construct.ts). Needs aws-cdk-lib
 * and constructs in the app (peer dependencies); nothing else of stepwise loads them.
 */
export { Stepwise } from '../infra/stepwise-construct.ts';
export type { StepwiseProps } from '../infra/stepwise-construct.ts';
