import { fileURLToPath } from 'node:url';
import { require as tsxRequire } from 'tsx/cjs/api';
import { describe, expect, it } from 'vitest';
import * as errors from '../../lib/core/errors.ts';
import { WaitRequest, isWaitRequest } from '../../lib/core/waits.ts';
import { isInstanceOf, markClass } from '../../lib/core/class-mark.ts';

/**
 * A second copy of the modules, made the way a .ts agent in a CommonJS package gets one: tsx's require
 * hook compiles them again for `require`, with classes of their own.
 */
const copyOf = <T>(path: string): T => tsxRequire(fileURLToPath(new URL(path, import.meta.url)), import.meta.url) as T;
const copy = copyOf<typeof errors>('../../lib/core/errors.ts');
const copyWaits = copyOf<typeof import('../../lib/core/waits.ts')>('../../lib/core/waits.ts');

describe('instanceof across copies of the package', () => {
  it('is a real second copy: its classes are not these', () => {
    expect(copy.PermanentError).not.toBe(errors.PermanentError);
    expect(copyWaits.WaitRequest).not.toBe(WaitRequest);
    // What a plain instanceof answered before the marks: the copy's error is not this copy's class.
    expect(Function.prototype[Symbol.hasInstance].call(errors.PermanentError, new copy.PermanentError('x'))).toBe(false);
  });

  it("knows a copy's errors by their class and by each class they extend", () => {
    const permanent = new copy.PermanentError('no');
    expect(permanent instanceof errors.PermanentError).toBe(true);
    expect(permanent instanceof errors.StepwiseError).toBe(true);
    expect(errors.isPermanent(permanent)).toBe(true);
    const outage = new copy.ModelUnavailableError('529', { retryAfterMs: 5000 });
    expect(outage instanceof errors.ModelUnavailableError).toBe(true);
    expect(outage instanceof errors.TransientError).toBe(true);
    expect(new copy.ToolError('bad row') instanceof errors.ToolError).toBe(true);
    expect(new copy.InvalidInputError('bad') instanceof errors.PermanentError).toBe(true);
  });

  it('claims no class a value does not have, in either copy', () => {
    expect(new copy.PermanentError('no') instanceof errors.TransientError).toBe(false);
    expect(new copy.ToolError('x') instanceof errors.PermanentError).toBe(false);
    expect(new copy.TransientError('x') instanceof errors.ModelUnavailableError).toBe(false);
    expect(new errors.PermanentError('no') instanceof errors.ToolError).toBe(false);
    expect(new Error('plain') instanceof errors.StepwiseError).toBe(false);
    for (const value of [null, undefined, 0, 'PermanentError', {}, () => 1]) expect(value instanceof errors.StepwiseError).toBe(false);
  });

  it("takes a copy's WaitRequest for a wait, and a look-alike object for a result", () => {
    const spec = { kind: 'approval' as const, approvers: ['ops@example.com'], request: 'drop it?' };
    expect(isWaitRequest(new copyWaits.WaitRequest(spec))).toBe(true);
    expect(isWaitRequest(new WaitRequest(spec))).toBe(true);
    expect(isWaitRequest({ spec })).toBe(false);
    expect(isWaitRequest(JSON.parse(JSON.stringify(new WaitRequest(spec))))).toBe(false);
  });

  it('leaves an unmarked subclass to the plain instanceof, so its name is never claimed for its parent', () => {
    class UsageError extends errors.StepwiseError {}
    class CopyUsageError extends copy.StepwiseError {}
    expect(new UsageError('x') instanceof UsageError).toBe(true);
    expect(new errors.StepwiseError('x') instanceof UsageError).toBe(false);
    expect(new CopyUsageError('x') instanceof UsageError).toBe(false);
    expect(new CopyUsageError('x') instanceof errors.StepwiseError).toBe(true);
  });

  it('marks with a registry symbol on the prototype, not an own field: the error serializes as before', () => {
    class Marked {}
    markClass(Marked, 'test.Marked');
    const value = new Marked();
    expect(Object.keys(value)).toEqual([]);
    expect(isInstanceOf(Marked, Object.create({ [Symbol.for('stepwise.test.Marked')]: true }))).toBe(true);
    expect(isInstanceOf(Marked, Object.create({ [Symbol('stepwise.test.Marked')]: true }))).toBe(false);
    expect(JSON.stringify(new errors.PermanentError('no'))).toBe(JSON.stringify({ permanent: true, name: 'PermanentError' }));
  });
});
