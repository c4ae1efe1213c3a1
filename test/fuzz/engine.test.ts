import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { canonicalJson } from '../../lib/core/canonical-json.ts';
import { decodeState, encodeDecision, encodeHead, encodeStep, type StoredCheckpoint } from '../../lib/core/codec.ts';
import type { RunState } from '../../lib/core/state.ts';
import { NewerFormatError, UnreadableCheckpointError } from '../../lib/core/errors.ts';
import { advance } from '../../lib/engine/advance.ts';
import { handleDelivery, parseMessage, runMessageSchema } from '../../lib/engine/handle-message.ts';
import { checkpointKey } from '../../lib/local/database.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { sleepUntil } from '../../lib/waits/tools.ts';
import { FakeRows } from '../support/fake-tool.ts';
import { fuzzRuns } from '../support/fuzz-runs.ts';
import { ManualClock, SimulatedCrash, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

/**
 * The engine's entry points fed arbitrary input: queue bodies, a model's tool arguments, stored
 * checkpoints of every record kind, mutated. Never a crash (only the expected error classes), always a
 * clear outcome, and nothing lost: what was stored stays as it was unless the input was valid.
 */
const rows = new FakeRows();
let reply: (step: number) => ModelReply = (n) => (n <= 3 ? { kind: 'tool', tool: 'write_row', input: { row: n } } : { kind: 'done', summary: 'done' });
const agent = defineAgent({
  name: 'fuzz',
  tools: [
    tool({
      name: 'write_row', description: 'w', input: z.object({ row: z.number().int().positive() }), sideEffect: true,
      run: (input, ctx) => ({ ...rows.apply(ctx.idempotencyKey, input.row), log: input.row === 2 ? 'x'.repeat(10_000) : '' }),
    }),
    sleepUntil({ maxMs: 3_600_000 }),
  ],
});
const db = tempDb();
const clock = new ManualClock();
const w = workerProcess({ dbPath: db.path, agent, model: new StubModel((n, p) => reply(n)), clock, workerId: 'A' });

beforeAll(async () => {
  // Stored checkpoints of every kind: completed (with a blob ref), running with steps, a recorded decision, waiting.
  await start(w.deps, 'g', 'done');
  await drain(w.deps, w.runtime, clock);
  await start(w.deps, 'g', 'running');
  for (let i = 0; i < 2; i++) await advance(w.deps, 'running');
  const crashing = workerProcess({ dbPath: db.path, agent, model: new StubModel((n) => reply(n)), clock, workerId: 'B', crashAt: { point: 'C3', step: 1 } });
  await start(crashing.deps, 'g', 'decided');
  await expect(advance(crashing.deps, 'decided')).rejects.toBeInstanceOf(SimulatedCrash);
  crashing.runtime.close();
  reply = () => ({ kind: 'tool', tool: 'sleep_until', input: { seconds: 60 } });
  await start(w.deps, 'g', 'waiting');
  await advance(w.deps, 'waiting');
  reply = (n) => (n <= 3 ? { kind: 'tool', tool: 'write_row', input: { row: n } } : { kind: 'done', summary: 'done' });
});
afterAll(() => { w.runtime.close(); db.cleanup(); });

/** A state's records as they would be stored, and a stored checkpoint's own, to compare them. */
const encoded = (state: RunState) => ({ head: encodeHead(state), steps: state.steps.map(encodeStep), pending: state.pending && encodeDecision(state.pending) });
const encodedParts = (stored: StoredCheckpoint) => ({ head: stored.head, steps: stored.steps, pending: stored.pending });
const snapshot = async (runId: string) => ({ stored: await w.runtime.store.load(runId), history: await w.runtime.store.history(runId) });

describe('a queue body\'s check', () => {
  it('accepts and returns exactly what the schema does: the hand-written check of the common case adds nothing', () => {
    const near = fc.dictionary(
      fc.constantFrom('runId', 'version', 'x', '__proto__', 'constructor'),
      fc.oneof(fc.string(), fc.integer(), fc.double(), fc.constantFrom(0, -1, 1, 2 ** 53, 2 ** 53 - 1, 1e300, null, true), fc.jsonValue()),
    );
    const message = fc.record({ runId: fc.string(), version: fc.oneof(fc.integer(), fc.double()) });
    fc.assert(fc.property(fc.oneof(near, message, fc.jsonValue()), (value) => {
      const body = JSON.stringify(value) ?? 'null';
      const schema = runMessageSchema.safeParse(JSON.parse(body));
      const parsed = parseMessage(body);
      expect(parsed.success).toBe(schema.success);
      if (schema.success) expect(parsed.data).toEqual(schema.data);
    }), fuzzRuns(3000));
    // Valid ones the generators rarely hit, and the bounds.
    for (const body of ['{"runId":"r","version":1}', '{"version":7,"runId":"r"}', '{"runId":"r","version":9007199254740991}', '{"runId":"r","version":9007199254740992}', '{"runId":"","version":1}', '{"runId":"r","version":1.5}', '{"runId":"r","version":1,"x":1}']) {
      expect(parseMessage(body).success, body).toBe(runMessageSchema.safeParse(JSON.parse(body)).success);
    }
  });
});

describe('fuzzing the engine', () => {
  it('queue bodies: any body is acked or handed back, never a throw, and no run changes', async () => {
    const before = await snapshot('running');
    const current = before.stored!.version;
    const received = rows.received.length;
    await fc.assert(fc.asyncProperty(
      fc.oneof(
        fc.string({ maxLength: 300 }),
        fc.json({ maxDepth: 3 }),
        fc.record({ runId: fc.oneof(fc.constantFrom('running', 'done', 'nope', ''), fc.string(), fc.integer()), version: fc.oneof(fc.integer(), fc.double(), fc.string(), fc.constant(null)) }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
        fc.constantFrom('{"runId":"running","version":1,"extra":1}', '{"runId":"running","version":1e400}', '\u0000', '{"__proto__":{"runId":"running"}}'),
      ).filter((body) => body !== JSON.stringify({ runId: 'running', version: current })),
      fc.integer({ min: 1, max: 20 }),
      async (body, receiveCount) => {
        const handled = await handleDelivery(w.deps, { body, receiveCount });
        expect(['ack', 'release']).toContain(handled.action);
      },
    ), fuzzRuns(300));
    expect(await snapshot('running')).toEqual(before);
    expect(rows.received.length).toBe(received);
  });

  it('tool arguments: any input the model sends is a step (the tool run, or an error the model sees), never a throw; the effect only for valid input', async () => {
    let i = 0;
    await fc.assert(fc.asyncProperty(
      fc.oneof(fc.constant('write_row'), fc.constant('sleep_until'), fc.string({ maxLength: 20 })),
      fc.oneof(fc.jsonValue({ maxDepth: 3 }), fc.anything({ maxDepth: 2 }), fc.record({ row: fc.oneof(fc.integer(), fc.double(), fc.string()) }), fc.record({ until: fc.oneof(fc.integer(), fc.string(), fc.double()) }), fc.record({ seconds: fc.oneof(fc.integer(), fc.double(), fc.string()) })),
      async (name, input) => {
        const runId = `args-${i++}`;
        reply = () => ({ kind: 'tool', tool: name, input });
        await start(w.deps, 'g', runId);
        const applied = rows.rows.size;
        const outcome = await advance(w.deps, runId);
        expect(outcome.kind).toBe('advanced');
        const state = decodeState((await w.runtime.store.load(runId))!);
        const valid = name === 'write_row' && z.object({ row: z.number().int().positive() }).safeParse(input).success;
        if (state.status === 'waiting') {
          expect(name).toBe('sleep_until');
        } else {
          expect(state).toMatchObject({ status: 'running', step: 1 });
          expect(state.steps[0]!.result.ok).toBe(valid || (name === 'write_row' ? false : state.steps[0]!.result.ok));
          if (name !== 'write_row' && name !== 'sleep_until') expect(state.steps[0]!.result.ok).toBe(false);
        }
        expect(rows.rows.size).toBe(applied + (valid ? 1 : 0));
      },
    ), fuzzRuns(150));
  });

  it('stored checkpoints of every kind, mutated: decoded to what they hold, or refused as unreadable or newer, never another error', async () => {
    const kinds: StoredCheckpoint[] = [];
    for (const runId of ['done', 'running', 'decided', 'waiting']) kinds.push((await w.runtime.store.load(runId))!);
    expect(kinds.map((k) => k.status)).toEqual(['completed', 'running', 'running', 'waiting']);
    expect(kinds[2]!.pending).toBeDefined();
    // As stored, each decodes to exactly what it holds: encoding the state again gives the same bytes,
    // the decision for the next step included.
    for (const stored of kinds) expect(encoded(decodeState(stored)), stored.runId).toEqual(encodedParts(stored));
    let migrated = false;
    const mutate = (text: string, how: [string, number, string, unknown, string]) => {
      const [kind, at, s, value, added] = how;
      const i = text.length ? at % text.length : 0;
      if (kind === 'char') return text.slice(0, i) + s + text.slice(i + 1);
      if (kind === 'cut') return text.slice(0, i);
      try {
        const json = JSON.parse(text) as Record<string, unknown>;
        const keys = Object.keys(json);
        const k = kind === 'add' ? added : keys[at % Math.max(1, keys.length)] ?? 'x';
        // A record whose format is changed is read as that format, and migrated: it need not hold what it did.
        if (k === 'formatVersion') migrated = true;
        // defineProperty, so that a key such as __proto__ is a field of the record as JSON.parse makes it.
        if (kind === 'delete') delete json[k]; else Object.defineProperty(json, k, { value, enumerable: true, writable: true, configurable: true });
        return JSON.stringify(json);
      } catch { return text; }
    };
    await fc.assert(fc.property(
      fc.nat({ max: 3 }),
      fc.constantFrom('head', 'step', 'pending'),
      fc.tuple(fc.constantFrom('char', 'cut', 'delete', 'set', 'add'), fc.nat(), fc.string({ maxLength: 3 }), fc.jsonValue({ maxDepth: 2 }), fc.constantFrom('__proto__', 'constructor', 'toString', 'x', '')),
      (which, field, how) => {
        const stored = structuredClone(kinds[which]!);
        migrated = false;
        let changed: 'head' | 'pending' | number | undefined = 'head';
        if (field === 'head') stored.head = mutate(stored.head, how);
        else if (field === 'pending' && stored.pending) { changed = 'pending'; stored.pending = mutate(stored.pending, how); }
        else if (stored.steps.length) { changed = how[1] % stored.steps.length; stored.steps[changed] = mutate(stored.steps[changed]!, how); }
        else changed = undefined;
        let state: RunState;
        try {
          state = decodeState(stored);
        } catch (error) {
          if (!(error instanceof UnreadableCheckpointError || error instanceof NewerFormatError)) throw error;
          expect(error.message.length).toBeGreaterThan(10);
          return;
        }
        // A field this code does not know is refused, never dropped.
        if (how[0] === 'add' && changed !== undefined) expect.fail(`a record with the unknown field ${JSON.stringify(how[4])} was decoded`);
        if (migrated) return;
        // Decoded: the state holds what the records say (as values: a changed character may be another
        // spelling of the same JSON), the decision only when it is for the next step.
        const parts = encodedParts(stored);
        const again = encoded(state);
        const same = (a: string | undefined, b: string | undefined) => expect(a === undefined ? a : canonicalJson(JSON.parse(a))).toBe(b === undefined ? b : canonicalJson(JSON.parse(b)));
        same(again.head, parts.head);
        expect(again.steps.length).toBe(parts.steps.length);
        again.steps.forEach((text, i) => same(text, parts.steps[i]));
        if (state.pending || changed === 'pending' || stored.pending === undefined) same(again.pending, state.pending ? parts.pending : undefined);
        else expect(state.pending).toBeDefined();
      },
    ), fuzzRuns(1500));
  });

  it('a mutated head in the store: the run is failed with the reason and the data kept, or left for newer code, or worked; never a throw', async () => {
    let i = 0;
    await fc.assert(fc.asyncProperty(
      fc.tuple(fc.constantFrom('char', 'set', 'delete'), fc.nat(), fc.string({ minLength: 1, maxLength: 2 }), fc.jsonValue({ maxDepth: 1 })),
      async ([kind, at, s, value]) => {
        const runId = `mut-${i++}`;
        await start(w.deps, 'g', runId);
        await advance(w.deps, runId);
        const { version, head: stored } = (await w.runtime.store.load(runId))!;
        let head = stored;
        const json = JSON.parse(head) as Record<string, unknown>;
        const keys = Object.keys(json);
        if (kind === 'char') { const p = at % head.length; head = head.slice(0, p) + s + head.slice(p + 1); } else {
          const k = keys[at % keys.length]!;
          if (kind === 'delete') delete json[k]; else json[k] = value;
          head = JSON.stringify(json);
        }
        // The row by its key, as the store finds it: a scan by run_id would grow with every case.
        const key = checkpointKey('(SELECT run_no FROM runs WHERE run_id = @runId)', '@version');
        expect(w.runtime.db.prepare(`UPDATE checkpoints SET head = @head WHERE id = ${key}`).run({ head, runId, version }).changes).toBe(1);
        const handled = await handleDelivery(w.deps, { body: JSON.stringify({ runId, version }), receiveCount: 1 });
        expect(['ack', 'release']).toContain(handled.action);
        const after = await w.runtime.store.load(runId);
        if (after!.status === 'failed' && after!.version > version) {
          expect(after!.reason).toMatch(/unreadable/);
          // The unreadable data is kept as it was.
          const kept = w.runtime.db.prepare(`SELECT head FROM checkpoints WHERE id = ${key}`).get({ runId, version }) as { head: string };
          expect(kept.head).toBe(head);
        }
      },
    ), fuzzRuns(60));
  });
});
