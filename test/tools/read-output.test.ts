import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { defineAgent, tool } from '../../lib/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { readOutput } from '../../lib/tools/read-output.ts';
import { ManualClock, drain, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

let db: ReturnType<typeof tempDb>;
afterEach(() => db?.cleanup());

/** 8,407 characters (10,207 bytes), some of them two bytes and some a surrogate pair, with a marker at the end. */
const REPORT = `${'row é, 🙂 ok; '.repeat(600)}THE END`;

const agent = (maxBytes?: number) => defineAgent({
  name: 'reader',
  tools: [
    tool({ name: 'fetch_report', description: 'Fetch the report.', input: z.object({}), sideEffect: false, run: () => REPORT }),
    readOutput(maxBytes ? { maxBytes } : {}),
  ],
});

/** Reads the ref from the prompt as a model would, then pages through by the offsets it is told. */
function reader(calls: ModelReply[] = []) {
  return (step: number, prompt: string): ModelReply => {
    if (step === 1) return { kind: 'tool', tool: 'fetch_report', input: {} };
    const ref = /stored as (sha256:[0-9a-f]{64})/.exec(prompt)?.[1] ?? /"ref":"(sha256:[0-9a-f]{64})"/.exec(prompt)?.[1];
    // The last read's line says where the next part starts (earlier reads' lines are in the steps list).
    const last = [...prompt.matchAll(/characters \d+-\d+ of \d+ \((?:the next part starts at offset (\d+)|the end of the output)\)/g)].at(-1);
    const next = last?.[1];
    if (step > 2 && next === undefined) return { kind: 'done', summary: 'read it all' };
    const reply: ModelReply = { kind: 'tool', tool: 'read_output', input: { ref, ...(next ? { offset: Number(next) } : {}) } };
    calls.push(reply);
    return reply;
  };
}

describe('the read_output tool', () => {
  it('lets the model read a large output it saw as an excerpt, part by part, every character once', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: agent(), model: new StubModel(reader()), clock, workerId: 'w' });
    await start(deps, 'read the report');
    await drain(deps, runtime, clock);
    const state = decodeState((await runtime.store.load('run'))!);
    expect(state.status).toBe('completed');
    expect(state.steps[0]!.result.ref).toMatch(/^sha256:/);
    const parts = state.steps.slice(1).map((s) => {
      expect(s.tool).toBe('read_output');
      // Each part fits the default inlineLimit, so the model sees it whole, not as another excerpt.
      expect(s.result.ref).toBeUndefined();
      expect(s.result.ok).toBe(true);
      expect(s.result.bytes).toBeLessThanOrEqual(4096);
      const part = s.result.text.slice(s.result.text.indexOf('\n') + 1);
      // Whole characters: a part cut inside a surrogate pair would be refused by the API in the next prompt.
      expect(part.isWellFormed()).toBe(true);
      return part;
    });
    // 10,207 bytes in parts of at most 3,500.
    expect(parts).toHaveLength(3);
    expect(parts.join('')).toBe(REPORT);
    expect(state.steps.at(-1)!.result.text).toMatch(new RegExp(`^characters \\d+-${REPORT.length} of ${REPORT.length} \\(the end of the output\\)`));
    runtime.close();
  });

  it('answers the model, not a retry, for a ref that is not this run\'s, an offset past the end, or a malformed ref', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const other = `sha256:${'ab'.repeat(32)}`;
    let runtimeOf: (() => void) | undefined;
    let ref: string | undefined;
    const script = (step: number, prompt: string): ModelReply => {
      // Seen after step 1's excerpt, and kept: the model's later prompts show only the last result in full.
      ref ??= /stored as (sha256:[0-9a-f]{64})/.exec(prompt)?.[1];
      if (step === 5) runtimeOf?.();
      return [
        { kind: 'tool', tool: 'fetch_report', input: {} },
        { kind: 'tool', tool: 'read_output', input: { ref: other } },
        { kind: 'tool', tool: 'read_output', input: { ref: 'report.txt' } },
        { kind: 'tool', tool: 'read_output', input: { ref, offset: REPORT.length + 1 } },
        // Retention removed the blob since.
        { kind: 'tool', tool: 'read_output', input: { ref } },
      ][step - 1] as ModelReply ?? { kind: 'done', summary: 'gave up' };
    };
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: agent(), model: new StubModel(script), clock, workerId: 'w' });
    runtimeOf = () => runtime.db.prepare('DELETE FROM blobs').run();
    await start(deps, 'read the report');
    await drain(deps, runtime, clock);
    const state = decodeState((await runtime.store.load('run'))!);
    expect(state.status).toBe('completed');
    expect(state.failures).toBe(0);
    expect(state.steps.map((s) => s.result.ok)).toEqual([true, false, false, false, false]);
    expect(state.steps[1]!.result.text).toMatch(/is not the ref of an output of this run's steps 1-1/);
    expect(state.steps[2]!.result.text).toMatch(/ref.*sha256: and 64 hex digits/);
    expect(state.steps[3]!.result.text).toBe(`offset ${REPORT.length + 1} is past the end: the output is ${REPORT.length} characters`);
    expect(state.steps[4]!.result.text).toMatch(/is no longer in the blob store/);
    runtime.close();
  });

  it('refuses a page size that could not be kept inline, when the agent loads', () => {
    expect(() => readOutput({ maxBytes: 100 })).toThrow(/maxBytes must be a whole number of bytes from 256/);
    expect(() => readOutput({ maxBytes: 300 * 1024 })).toThrow(/maxBytes/);
    expect(readOutput({ maxBytes: 1000 }).description).toContain('up to 1000 bytes');
  });
});
