import { readFileSync } from 'node:fs';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { Stepwise, type StepwiseProps } from '../../infra/stepwise-construct.ts';
import { tempDir } from '../support/temp-dirs.ts';

/** The project's cdk.json context (feature flags), which `new App()` does not read by itself. */
export function cdkContext(): Record<string, unknown> {
  return (JSON.parse(readFileSync(new URL('../../cdk.json', import.meta.url), 'utf8')) as { context: Record<string, unknown> }).context;
}

export const FIXTURE_AGENT = 'test/aws/fixture-agent.ts';

/**
 * A stack holding one construct, synthesized without bundling (esbuild is skipped for speed; one test
 * bundles for real). `configure` may add resources to the stack before the construct is made.
 */
export function synthStepwise(
  props: Partial<StepwiseProps> = {},
  options: { bundle?: boolean; configure?: (stack: Stack) => Partial<StepwiseProps>; after?: (stepwise: Stepwise) => void; outdir?: string } = {},
): { app: App; stack: Stack; stepwise: Stepwise; template: Template } {
  const app = new App({
    // The built-in CloudFormation validator costs seconds per synth: `npm run synth` (tested once) runs it.
    context: { ...cdkContext(), '@aws-cdk/core:validateAgainstDefaultRules': false, ...(options.bundle ? {} : { 'aws:cdk:bundling-stacks': [] }) },
    // An App given no outdir makes one in the temp folder and never removes it: one a synth, thousands a day.
    outdir: options.outdir ?? tempDir('stepwise-cdk-'),
  });
  const stack = new Stack(app, 'Test', { env: { account: '123456789012', region: 'us-east-1' } });
  const extra = options.configure?.(stack) ?? {};
  const stepwise = new Stepwise(stack, 'Stepwise', { agentPath: FIXTURE_AGENT, emailFrom: 'agent@example.com', ...extra, ...props });
  options.after?.(stepwise);
  return { app, stack, stepwise, template: Template.fromStack(stack) };
}
