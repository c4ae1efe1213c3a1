import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parseToolInput } from '../../lib/core/tool-input.ts';

describe('parseToolInput', () => {
  const schema = z.object({ row: z.number(), meta: z.any() });

  it('hands the tool a copy: a change to a z.any() field leaves the input given (the call on record) as it was', async () => {
    const given = { row: 1, meta: { by: 'model', tags: ['a', { b: 1 }] } };
    const parsed = await parseToolInput(schema, given);
    if (!parsed.ok) throw new Error('not parsed');
    const data = parsed.data as { meta: { by: string; tags: unknown[] } };
    data.meta.by = 'tool';
    (data.meta.tags[1] as { b: number }).b = 2;
    expect(given).toEqual({ row: 1, meta: { by: 'model', tags: ['a', { b: 1 }] } });
  });

  it('copies a "__proto__" field as a field, never as the copy\'s prototype', async () => {
    const given = JSON.parse('{"row":1,"meta":{"__proto__":{"polluted":true}}}') as unknown;
    const parsed = await parseToolInput(schema, given);
    if (!parsed.ok) throw new Error('not parsed');
    const meta = (parsed.data as { meta: Record<string, unknown> }).meta;
    expect(Object.keys(meta)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(meta)).toBe(Object.prototype);
    expect((meta as { polluted?: boolean }).polluted).toBeUndefined();
  });

  it('keeps what is not plain JSON (a stub model\'s Date) as it is', async () => {
    const at = new Date(0);
    const parsed = await parseToolInput(z.object({ at: z.date() }), { at });
    expect(parsed).toEqual({ ok: true, data: { at } });
    expect((parsed as { data: { at: Date } }).data.at).toBe(at);
  });
});
