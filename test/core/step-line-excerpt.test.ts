import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { excerpt, foldedExcerpt } from '../../lib/core/prompt.ts';

describe('a step line\'s excerpt of its output', () => {
  // The rule it keeps: whitespace (and the line breaks \s leaves out: U+001C-U+001E, NEXT LINE) folded to
  // one space, trimmed, then cut to the excerpt.
  const reference = (text: string, max: number) => excerpt(text.replace(/[\s\u001c-\u001e\u0085]+/g, ' ').trim(), max);
  const spaced = fc.array(fc.oneof(fc.constantFrom(' ', '  ', '\n', '\t \r\n', '\u00a0', '\u2028', '\u0085', ' \u0085\n', '\u001e'), fc.string({ maxLength: 12 }), fc.constant('\ud83d\ude00')), { maxLength: 400 })
    .map((parts) => parts.join(''));

  it('folds only the prefix it needs and gives what folding the whole output gave, for any text and length', () => {
    fc.assert(fc.property(spaced, fc.integer({ min: 1, max: 320 }), (text, max) => {
      expect(foldedExcerpt(text, max)).toBe(reference(text, max));
    }), { numRuns: 3000 });
  });

  it('at the edges: whitespace across the cut, an output that is mostly whitespace, one just longer than the excerpt', () => {
    const max = 10;
    for (const text of [
      `${'a'.repeat(35)}${' '.repeat(20)}b`, `${' \n'.repeat(40)}x`, `${'a '.repeat(5)}${' '.repeat(40)}`, 'a'.repeat(11), 'a'.repeat(12), `  ${'a'.repeat(40)}`,
      `${' '.repeat(30)}${'a'.repeat(12)}`,
      // Exactly the excerpt, then only whitespace past the cut: no ellipsis.
      `${'a'.repeat(10)}${' '.repeat(40)}`, `${'a'.repeat(10)}\n${' '.repeat(40)}b`,
    ]) expect(foldedExcerpt(text, max)).toBe(reference(text, max));
  });
});
