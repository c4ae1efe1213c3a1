import { afterEach, describe, expect, it } from 'vitest';
import type { EngineDeps } from '../../lib/engine/deps.ts';
import { SqliteEventBuffer } from '../../lib/local/sqlite-event-buffer.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { checkEvent, emitEvent } from '../../lib/waits/events.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { ManualClock, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { workVisible } from '../support/queue-work.ts';
import { StubModel } from '../support/stub-model.ts';
import { waitAgent } from '../support/wait-agent.ts';

let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

const waitForOrder: ModelReply = { kind: 'tool', tool: 'wait_for_event', input: { type: 'order.paid', key: 'order-1' } };

describe('an event delivered again while the run waits for the same type and key once more', () => {
  it('answers only the wait it answered the first time: the later wait stays open for a new event', async () => {
    db = tempDb();
    const clock = new ManualClock();
    // Two waits in a row for the same (type, key): a second payment of the same order, say.
    const model = new StubModel((step) => step <= 2 ? waitForOrder : { kind: 'done', summary: 'both paid' });
    const proc = workerProcess({ dbPath: db.path, agent: waitAgent(new FakeRows(), []), model, clock, workerId: 'worker-A' });
    const events = new SqliteEventBuffer(proc.runtime.db, { clock });
    const deps: EngineDeps = { ...proc.deps, waits: { events } };
    const emit = (id: string) => emitEvent({ ...deps, events, waitingFor: (t, k) => proc.runtime.store.waitingFor(t, k) },
      { type: 'order.paid', key: 'order-1', id, payload: { id } });
    await start(deps);
    await workVisible(deps, proc.runtime);
    expect((await emit('evt-1')).resumed).toMatchObject([{ outcome: 'resumed' }]);
    clock.advance(1_000);
    await workVisible(deps, proc.runtime);
    expect(await loadState(proc.runtime)).toMatchObject({ status: 'waiting', step: 1 });

    // EventBridge delivers at least once: evt-1 again. It answered step 1; it is not step 2's answer.
    const again = await emit('evt-1');
    expect(again.fresh).toBe(false);
    expect(again.resumed).toMatchObject([{ outcome: 'already-answered', record: { step: 1 } }]);
    expect(await loadState(proc.runtime)).toMatchObject({ status: 'waiting', step: 1 });

    expect((await emit('evt-2')).resumed).toMatchObject([{ outcome: 'resumed' }]);
    await workVisible(deps, proc.runtime);
    const done = await loadState(proc.runtime);
    expect(done.status).toBe('completed');
    expect(done.steps.map((s) => JSON.parse(s.result.text).id)).toEqual(['evt-1', 'evt-2']);
    proc.runtime.close();
  });

  it('an event id holding half an emoji is refused: SQLite kept it as three U+FFFD, and its redelivery answered the next wait too', () => {
    // Kept before the wait began, the event answered it under the id read back from the file, 'evt-\ufffd\ufffd\ufffd';
    // delivered again as 'evt-\ud800' while the run waited for the same type and key once more, it was not
    // known as the event that answered, and answered that wait as well.
    expect(() => checkEvent({ type: 'order.paid', key: 'order-1', id: 'evt-\ud800' })).toThrow('invalid event: id: an event id may not hold half of an emoji (a lone UTF-16 surrogate)');
    expect(checkEvent({ type: 'order.paid', key: 'order-1', id: 'evt-😀' }).id).toBe('evt-😀');
  });
});
