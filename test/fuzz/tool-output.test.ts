import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { canonicalJson, collectionAsJson } from '../../lib/core/canonical-json.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { DEFAULT_INLINE_LIMIT } from '../../lib/core/result.ts';
import { advance } from '../../lib/engine/advance.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { fuzzRuns } from '../support/fuzz-runs.ts';
import { ManualClock, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

/**
 * Whatever a tool returns, directly or through ctx.once: the step completes with the output as JSON shows
 * it, or the run fails at once naming the tool (or the key) - never a throw out of the step, and an effect
 * under ctx.once runs once however the step ends and is retried.
 */
let output: unknown;
let effects = 0;
const returns = (viaOnce: boolean) => tool({
  name: viaOnce ? 'apply' : 'read', description: 'returns the case\'s value', input: z.object({}), sideEffect: viaOnce,
  run: (_input, ctx) => (viaOnce ? ctx.once(async () => { effects += 1; return output; }) : output),
});
const agent = defineAgent({ name: 'outputs', tools: [returns(false), returns(true)] });
let toolName = 'read';
const db = tempDb();
const clock = new ManualClock();
const w = workerProcess({ dbPath: db.path, agent, model: new StubModel((n) => (n === 1 ? { kind: 'tool', tool: toolName, input: {} } : { kind: 'done', summary: 'done' })), clock, workerId: 'A' });
afterAll(() => { w.runtime.close(); db.cleanup(); });

/**
 * Outputs of DEFAULT_INLINE_LIMIT bytes and one either side, as text and as JSON, in characters of 1 to 4
 * bytes: the last one kept inline, the next by reference.
 */
const atLimit = fc.tuple(fc.constantFrom(-1, 0, 1), fc.constantFrom('x', '\u00e9', '\u20ac', '\u{1F600}'), fc.boolean()).map(([off, ch, asJson]) => {
  const bytes = DEFAULT_INLINE_LIMIT + off - (asJson ? '{"a":""}'.length : 0);
  const size = Buffer.byteLength(ch);
  const text = ch.repeat(Math.floor(bytes / size)) + 'x'.repeat(bytes % size);
  return asJson ? { a: text } : text;
});

/** Values JSON holds, and values it cannot: BigInts, functions, symbols, a value that contains itself. */
const anyOutput = fc.oneof(
  atLimit,
  fc.anything({ maxDepth: 3, withBigInt: true, withMap: true, withSet: true, withDate: true, withTypedArray: true, withNullPrototype: true, withSparseArray: true }),
  fc.constantFrom(() => 1, Symbol('s'), 10n, new Date(0), new Map([[1, 2n]]), 'x'.repeat(5000)),
  fc.jsonValue({ maxDepth: 2 }).map((inner) => { const o: Record<string, unknown> = { inner }; o.self = o; return o; }),
);

const storable = (value: unknown): string | undefined => {
  try {
    return typeof value === 'string' ? value : value === undefined ? '' : canonicalJson(value);
  } catch {
    return undefined;
  }
};

/** What the ledger keeps of a result and hands back (null for undefined, a Map or Set as what it holds); a function's JSON is nothing. */
const readBack = (value: unknown): unknown => {
  try {
    const json = JSON.stringify(value ?? null, (_key, v: unknown) => collectionAsJson(v));
    return json === undefined ? value : JSON.parse(json);
  } catch {
    return value;
  }
};

describe('tool outputs of any kind', () => {
  it.each([['returned directly', false], ['returned through ctx.once', true]])('%s: the step completes with the JSON of it, or the run fails at once with the reason', async (_how, viaOnce) => {
    let i = 0;
    await fc.assert(fc.asyncProperty(anyOutput, async (value) => {
      output = value;
      effects = 0;
      toolName = viaOnce ? 'apply' : 'read';
      const runId = `out-${viaOnce ? 'once' : 'direct'}-${i++}`;
      await start(w.deps, 'g', runId);
      expect((await advance(w.deps, runId)).kind).toBe('advanced');
      const state = decodeState((await w.runtime.store.load(runId))!);
      // Through once() the tool gets the result as a retry would, the JSON of it read back.
      const text = storable(viaOnce ? readBack(value) : value);
      if (text !== undefined) {
        expect(state).toMatchObject({ status: 'running', step: 1 });
        const { result } = state.steps[0]!;
        // Kept inline up to the limit, by reference above it (the agent sets no inlineLimit), and its size in bytes.
        expect(result.bytes).toBe(Buffer.byteLength(text));
        expect(result.ref === undefined, `${result.bytes} bytes`).toBe(result.bytes <= DEFAULT_INLINE_LIMIT);
        if (result.ref === undefined) expect(result.text).toBe(text);
        else expect((await w.runtime.blobs.get(result.ref))!.toString('utf8')).toBe(text);
      } else {
        expect(state.status).toBe('failed');
        expect(state.reason).toMatch(viaOnce ? /^step 1: the effect under .* ran, but its result cannot be stored as JSON/ : /^step 1: tool read returned a .* cannot be stored as JSON/);
        if (viaOnce) {
          // Retried: the key's record (null) is the result, the effect is not run again.
          await retryRun(w.deps, runId, {});
          await advance(w.deps, runId);
          expect(decodeState((await w.runtime.store.load(runId))!).steps[0]!.result.text).toBe('null');
        }
      }
      if (viaOnce) expect(effects).toBe(1);
    }), fuzzRuns(100));
  });
});
