import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson, canonicalValue } from '../../lib/core/canonical-json.ts';

/**
 * What canonicalJson has always written: every plain object copied with its keys sorted. Its fields are
 * defined, not assigned, so that a `__proto__` field stays one (the copy had dropped it).
 */
function byCopying(value: unknown): string {
  const sort = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sort);
    if (v && typeof v === 'object' && (v as object).constructor === Object) {
      const out: Record<string, unknown> = {};
      for (const key of Object.keys(v).sort()) {
        Object.defineProperty(out, key, { value: sort((v as Record<string, unknown>)[key]), enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
    return v;
  };
  return JSON.stringify(sort(value));
}

/** Keys that sort differently as strings and as array indexes ("10" before "9"), ones that only look like indexes, and `__proto__`. */
const key = fc.oneof(fc.string({ maxLength: 4 }), fc.constantFrom('0', '1', '9', '10', '01', '-1', '4294967295', 'a', 'b', 'B', '__proto__', '__proto__x'));
const json = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.jsonValue({ maxDepth: 1 }), tie('object'), tie('array')),
  object: fc.dictionary(key, tie('value'), { maxKeys: 6, noNullPrototype: true }),
  array: fc.array(tie('value'), { maxLength: 4 }),
})).value;

describe('canonical JSON', () => {
  it('writes the bytes the copying sort wrote, for any JSON value, in order or not', () => {
    fc.assert(fc.property(json, (value) => {
      expect(canonicalJson(value)).toBe(byCopying(value));
    }), { numRuns: 2000 });
  });

  it('gives the value its canonical JSON reads back, keys in that order, and the very value where it is that already', () => {
    const withUndefined = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: 'small' }, fc.jsonValue({ maxDepth: 1 }), fc.constant(undefined), tie('object'), tie('array')),
      object: fc.dictionary(key, tie('value'), { maxKeys: 6, noNullPrototype: true }),
      array: fc.array(tie('value'), { maxLength: 4 }),
    })).value;
    fc.assert(fc.property(withUndefined, (value) => {
      fc.pre(value !== undefined);
      const canonical = canonicalValue(value);
      const text = canonicalJson(value);
      expect(canonical).toStrictEqual(JSON.parse(text));
      // Keys in the order the text has them, at every depth.
      expect(JSON.stringify(canonical)).toBe(text);
      // Canonical already: itself.
      const read = JSON.parse(text);
      expect(canonicalValue(read)).toBe(read);
    }), { numRuns: 2000 });
  });

  it('sorts an object in order outside and out of order inside, and leaves the value it was given as it was', () => {
    const value = { a: 1, b: { d: [{ z: 1, y: 2 }], c: 3 }, c: { '10': 1, '9': 2 } };
    const before = JSON.stringify(value);
    expect(canonicalJson(value)).toBe('{"a":1,"b":{"c":3,"d":[{"y":2,"z":1}]},"c":{"9":2,"10":1}}');
    expect(JSON.stringify(value)).toBe(before);
  });

  it('keeps a __proto__ field (JSON.parse makes it an own one) in any key order, and sets no prototype', () => {
    const inOrder = JSON.parse('{"__proto__":{"x":1},"b":1}') as object;
    const outOfOrder = JSON.parse('{"b":1,"__proto__":{"x":1}}') as object;
    const expected = '{"__proto__":{"x":1},"b":1}';
    expect(canonicalJson(inOrder)).toBe(expected);
    expect(canonicalJson(outOfOrder)).toBe(expected);
    // In order, copied from a later field on (an undefined one, dropped): the fields before it are copied too.
    expect(canonicalJson({ ...JSON.parse('{"__proto__":{"x":1}}') as object, a: undefined, b: 1 })).toBe(expected);
    const copy = canonicalValue(outOfOrder) as object;
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.keys(copy)).toEqual(['__proto__', 'b']);
  });

  it('keeps what JSON.stringify does with values that are not plain objects', () => {
    const at = new Date(0);
    expect(canonicalJson({ b: at, a: undefined, c: [undefined, () => 1] })).toBe('{"b":"1970-01-01T00:00:00.000Z","c":[null,null]}');
  });

  it('writes a Map or a Set as what it holds, where JSON.stringify writes {}', () => {
    expect(canonicalJson({ rows: new Map<string, unknown>([['b', 2], ['a', new Set([1, 1, 2])]]) })).toBe('{"rows":{"a":[1,2],"b":2}}');
    expect(canonicalJson(new Map<unknown, string>([[1, 'one'], ['2', 'two']]))).toBe('[[1,"one"],["2","two"]]');
    expect(canonicalJson([new Set(), new Map()])).toBe('[[],{}]');
    // A __proto__ key stays a field, as JSON.parse keeps it, and sets no prototype.
    const parsed = JSON.parse(canonicalJson(new Map([['__proto__', 1]]))) as Record<string, unknown>;
    expect(Object.keys(parsed)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
  });

  it('writes an Error as its name, message and own fields, and a typed array as its numbers, where JSON.stringify writes {} or "0", "1"', () => {
    const error = Object.assign(new RangeError('row 7 out of range', { cause: new Error('table has 6 rows') }), { code: 'E_RANGE' });
    expect(canonicalJson({ failed: error })).toBe('{"failed":{"cause":{"message":"table has 6 rows","name":"Error"},"code":"E_RANGE","message":"row 7 out of range","name":"RangeError"}}');
    // No stack: it names the worker's files, and the same failure on two workers would be two outputs.
    expect(canonicalJson(new Error('x'))).not.toContain('stack');
    expect(canonicalJson({ bytes: new Uint8Array([1, 2, 255]), floats: new Float32Array([0.5]) })).toBe('{"bytes":[1,2,255],"floats":[0.5]}');
    // A Buffer keeps Node's own toJSON, as an effect's stored result does.
    expect(canonicalJson(Buffer.from([1, 2]))).toBe('{"data":[1,2],"type":"Buffer"}');
  });

  it('sorts an object of no prototype, and one whose own constructor field hides Object\'s, as any plain object', () => {
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { b: 1, a: new Set([2]) });
    expect(canonicalJson(bare)).toBe('{"a":[2],"b":1}');
    expect(canonicalJson({ constructor: 'x', b: 1, a: 2 })).toBe('{"a":2,"b":1,"constructor":"x"}');
  });
});
