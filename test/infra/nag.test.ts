import { App, Validations, type Stack } from 'aws-cdk-lib';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { StepwiseStack } from '../../infra/stepwise-stack.ts';
import { cdkContext, synthStepwise } from './synth-support.ts';
import { tempDir } from '../support/temp-dirs.ts';

/**
 * cdk-nag's AwsSolutions pack: no finding is left unacknowledged, and every acknowledgement names a
 * finding that really occurs there (none is stale or blanket), with its reason.
 */

interface Finding { rule: string; path: string }

function findings(stack: Stack, honourAcknowledgements: boolean): Finding[] {
  const pack = new AwsSolutionsChecks(stack);
  if (!honourAcknowledgements) (pack as unknown as { isAcknowledged: () => boolean }).isAcknowledged = () => false;
  const report = pack.validateScope(stack);
  return report.violations.flatMap((v) => v.violatingResources.map((r) => ({ rule: v.ruleName, path: r.constructPath ?? '' })));
}

function acknowledgements(scope: IConstruct): { rule: string; path: string; reason: string }[] {
  return scope.node.findAll().flatMap((c) => c.node.metadata
    .filter((m) => m.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
    .flatMap((m) => Object.entries(m.data as Record<string, string>).map(([rule, reason]) => ({ rule: rule.replace(/^annotation::/i, ''), path: c.node.path, reason: String(reason) }))));
}

function expectClean(stack: Stack): void {
  expect(findings(stack, true), 'unacknowledged findings').toEqual([]);
  const raw = findings(stack, false);
  const acks = acknowledgements(stack);
  expect(acks.length).toBeGreaterThan(0);
  for (const ack of acks) {
    expect(ack.reason.length, `${ack.rule} at ${ack.path} needs a reason`).toBeGreaterThan(40);
    expect(raw.some((f) => f.rule === ack.rule && (f.path === ack.path || f.path.startsWith(`${ack.path}/`))), `${ack.rule} at ${ack.path} acknowledges nothing`).toBe(true);
  }
}

describe('cdk-nag AwsSolutions', () => {
  it('finds nothing unacknowledged in the default construct, and each acknowledgement matches a real finding', () => {
    const { stack } = synthStepwise();
    expectClean(stack);
    // What is acknowledged, so a new one is a visible change of this list.
    expect([...new Set(acknowledgements(stack).map((a) => a.rule.replace(/\[.*\]$/, '[...]')))].sort()).toEqual([
      'AwsSolutions-APIG4', 'AwsSolutions-IAM5[...]', 'AwsSolutions-SMG4', 'AwsSolutions-SQS3',
    ]);
  });

  it('finds nothing unacknowledged with event rules, no access-log bucket and an existing key secret', () => {
    const { stack } = synthStepwise({ agentPath: 'test/infra/start-agent.ts', eventPatterns: [{ source: ['billing'] }], logS3AccessLogs: false }, {
      configure: (s) => ({ existingApiKeySecret: secretsmanager.Secret.fromSecretNameV2(s, 'Key', 'anthropic/api-key') }),
    });
    expectClean(stack);
  });

  it('finds nothing unacknowledged in the project\'s own stack (the one npm run synth checks)', () => {
    const app = new App({ outdir: tempDir('stepwise-cdk-'), context: { ...cdkContext(), '@aws-cdk/core:validateAgainstDefaultRules': false, 'aws:cdk:bundling-stacks': [] } });
    const stack = new StepwiseStack(app, 'Stepwise', { agentPath: 'examples/aws/agent.ts' });
    expectClean(stack);
  });
});
