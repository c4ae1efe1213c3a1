import { describe, expect, it } from 'vitest';
import { serversNeeded, testFiles } from './aws-global-setup.ts';

describe('the global setup starts the AWS servers for any run that selects a test using them', () => {
  const files = testFiles();

  it('reads the repository\'s test files, this one among them', () => {
    expect(files).toContain('test/support/global-setup.test.ts');
    expect(files).toContain('test/chaos/aws-process-chaos.test.ts');
  });

  it.each([
    [[], true],
    [['test/local'], false],
    [['./test/local', 'test/engine'], false],
    [['test/chaos/process-chaos.test.ts'], false],
    // A folder whose name says nothing of AWS, holding AWS tests: the case a rule on the filter's name missed.
    [['test/chaos'], true],
    [['test/local', 'test/fuzz'], true],
    [['process-chaos'], true],
    [['test/aws/sqs-run-queue.test.ts:12'], true],
    [['/repo/test/chaos'], true],
    [['/repo/test/local'], false],
    // The value of an option given apart (`--reporter verbose`): it selects no file, so it may not be a filter.
    [['test/local', 'verbose'], true],
  ] as [string[], boolean][])('filters %j: %s', (filters, needed) => {
    expect(serversNeeded(filters, files, '/repo/')).toBe(needed);
  });
});
