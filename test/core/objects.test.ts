import { describe, expect, it } from 'vitest';
import { withFields } from '../../lib/core/objects.ts';

describe('withFields', () => {
  it('is { ...base, ...extra }: a new object, the extra fields winning, the base left as it was, keys in the same order', () => {
    const base = { runId: 'r', step: 3, usage: { inputTokens: 1 } };
    const next = withFields(base, { step: 4, steps: [] as number[] });
    expect(next).toEqual({ runId: 'r', step: 4, usage: { inputTokens: 1 }, steps: [] });
    expect(Object.keys(next)).toEqual(Object.keys({ ...base, step: 4, steps: [] }));
    expect(base).toEqual({ runId: 'r', step: 3, usage: { inputTokens: 1 } });
    expect(next).not.toBe(base);
    expect(next.usage).toBe(base.usage); // shallow, as a spread is
  });
});
