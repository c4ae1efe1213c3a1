import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { excerpt, foldedExcerpt, stepLine } from '../../lib/core/prompt.ts';
import { shapeResult } from '../../lib/core/result.ts';

// A lone surrogate: what the Anthropic API refuses in a request (400, "no low surrogate in string").
const wellFormed = (text: string): boolean => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);

describe('excerpts never split an emoji', () => {
  it('a large output whose excerpt ends inside a surrogate pair is stored and shown as whole characters', () => {
    const output = `${'x'.repeat(999)}${'\u{1F600}'.repeat(3000)}`;
    const { result } = shapeResult(output, true);
    expect(result.ref).toBeDefined();
    expect(wellFormed(result.text)).toBe(true);
    expect(result.text).toBe(`${'x'.repeat(999)}…`);
    expect(wellFormed(stepLine({ step: 1, tool: 't', input: {}, at: 0, result, workerId: 'w' }))).toBe(true);
  });

  it('for any text of emoji and letters, at any length', () => {
    const text = fc.array(fc.constantFrom('a', ' ', '\u{1F600}', '\u{1F9D1}\u200d\u{1F4BB}'), { maxLength: 200 }).map((parts) => parts.join(''));
    fc.assert(fc.property(text, fc.integer({ min: 1, max: 120 }), (t, max) => {
      expect(wellFormed(excerpt(t, max))).toBe(true);
      expect(wellFormed(foldedExcerpt(t, max))).toBe(true);
      expect(excerpt(t, max).length).toBeLessThanOrEqual(max + 1);
    }), { numRuns: 2000 });
  });
});
