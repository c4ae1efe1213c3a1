import { describe, expect, it } from 'vitest';
import { storableResult } from '../../lib/core/once-result.ts';

describe('an effect\'s stored result', () => {
  it('keeps what a Map or a Set holds, as a tool output does, where JSON wrote {} and the caller got nothing', () => {
    const stored = storableResult('run/step-1', { ids: new Set([3, 4]), byTable: new Map([['orders', 2]]), at: new Date(0) });
    expect(stored.json).toBe('{"ids":[3,4],"byTable":{"orders":2},"at":"1970-01-01T00:00:00.000Z"}');
    // The caller gets the text read back, the first try as a retry would.
    expect(stored.value).toEqual({ ids: [3, 4], byTable: { orders: 2 }, at: '1970-01-01T00:00:00.000Z' });
    expect(stored.unstorable).toBeUndefined();
    expect(storableResult('run/step-2', new Map([[1, 'one']])).value).toEqual([[1, 'one']]);
  });

  it('keeps an Error\'s name, message and fields, and a typed array\'s numbers, as a tool output does', () => {
    const stored = storableResult('run/step-3', { error: Object.assign(new TypeError('bad row'), { row: 7 }), bytes: new Uint8Array([9, 8]), buffer: Buffer.from([1]) });
    expect(stored.value).toEqual({ error: { name: 'TypeError', message: 'bad row', row: 7 }, bytes: [9, 8], buffer: { type: 'Buffer', data: [1] } });
    expect(stored.unstorable).toBeUndefined();
  });

  it('keeps an Error that is its own cause as null, saying where it refers to itself, where it said only "nested too deeply"', () => {
    // Written as an object, the Error is a new object at each level: JSON.stringify overflows, where a plain
    // object that contains itself gives its circular TypeError.
    const error: Error & { cause?: unknown } = new Error('loop');
    error.cause = error;
    const stored = storableResult('run/step-4', error);
    expect(stored.json).toBe('null');
    expect(stored.unstorable?.message).toContain('(it refers to itself: cause is the whole value again)');
  });
});
