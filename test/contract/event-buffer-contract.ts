import { describe, expect, it } from 'vitest';
import type { EventBuffer } from '../../lib/ports.ts';

let counter = 0;

/** The kept-events contract, run on SQLite and on DynamoDB Local. */
export function eventBufferContract(name: string, subject: () => { events: EventBuffer; setNow(ms: number): void }): void {
  describe(`EventBuffer contract: ${name}`, () => {
    it('keeps an event once per id and finds it by type and key from a time on', async () => {
      const { events, setNow } = subject();
      setNow(1_000);
      const type = `order.paid.${process.pid}.${counter++}`;
      const event = { id: `e-${counter}`, type, key: 'order-7', payload: { amount: 12, note: '<b>x</b>' }, receivedAt: 1_000 };
      expect(await events.put(event)).toBe(true);
      expect(await events.put({ ...event, receivedAt: 1_500, payload: 'redelivered' })).toBe(false);
      expect(await events.put({ ...event, id: `e-${counter}-b`, receivedAt: 2_000 })).toBe(true);
      expect(await events.put({ ...event, id: `e-${counter}-c`, key: 'order-8' })).toBe(true);
      const found = await events.find(type, 'order-7', 0);
      expect(found.map((e) => [e.id, e.receivedAt])).toEqual([[event.id, 1_000], [`e-${counter}-b`, 2_000]]);
      expect(found[0]!.payload).toEqual({ amount: 12, note: '<b>x</b>' });
      expect((await events.find(type, 'order-7', 1_001)).map((e) => e.id)).toEqual([`e-${counter}-b`]);
      expect(await events.find(type, 'order-9', 0)).toEqual([]);
    });

    it('takes an id reused under another type or key as an event of its own (ids are unique per type and key)', async () => {
      const { events, setNow } = subject();
      setNow(5_000);
      const type = `reused.${process.pid}.${counter++}`;
      const id = `same-${counter}`;
      expect(await events.put({ id, type, key: 'a', payload: 1, receivedAt: 5_000 })).toBe(true);
      expect(await events.put({ id, type, key: 'b', payload: 2, receivedAt: 5_000 })).toBe(true);
      expect(await events.put({ id, type: `${type}.other`, key: 'a', payload: 3, receivedAt: 5_000 })).toBe(true);
      expect(await events.put({ id, type, key: 'b', payload: 4, receivedAt: 5_100 })).toBe(false);
      expect((await events.find(type, 'b', 0)).map((e) => [e.id, e.payload])).toEqual([[id, 2]]);
      expect((await events.find(`${type}.other`, 'a', 0)).map((e) => e.payload)).toEqual([3]);
    });

    it('forgets events after their retention window', async () => {
      const { events, setNow } = subject();
      const type = `late.${process.pid}.${counter++}`;
      setNow(10_000);
      await events.put({ id: `old-${counter}`, type, key: 'k', payload: null, receivedAt: 10_000 });
      setNow(10_000 + 25 * 3600 * 1000);
      expect(await events.find(type, 'k', 0)).toEqual([]);
    });

    it('keeps a large payload whole', async () => {
      const { events, setNow } = subject();
      setNow(20_000);
      const type = `big.${process.pid}.${counter++}`;
      const payload = { blob: 'x'.repeat(200 * 1024) };
      await events.put({ id: `big-${counter}`, type, key: 'k', payload, receivedAt: 20_000 });
      expect((await events.find(type, 'k', 0))[0]!.payload).toEqual(payload);
    });
  });
}
