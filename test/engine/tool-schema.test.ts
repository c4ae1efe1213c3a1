import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, loadAgent, tool, toolSpecs, type AgentDefinition } from '../../lib/agent.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { ManualClock, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const withInput = (input: z.ZodType) => tool({ name: 'when', description: 'takes a date', input, sideEffect: false, run: () => 'ok' });

describe('a tool input that cannot be sent to the model is an error when the agent loads', () => {
  let dir: string | undefined;
  let db: ReturnType<typeof tempDb> | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    db?.cleanup();
    dir = undefined;
    db = undefined;
  });

  it.each([
    ['a date', z.object({ at: z.date() }), /tool when: its input cannot be sent to the model as JSON Schema: Date cannot be represented/],
    ['a transform', z.object({ s: z.string().transform((x) => x.length) }), /tool when: .*Transforms cannot be represented/],
    ['a bigint', z.object({ n: z.bigint() }), /tool when: .*BigInt cannot be represented/],
    ['not an object', z.string(), /tool when: its input must be an object schema \(z\.object\), not "string"/],
    ['a union of objects', z.discriminatedUnion('kind', [z.object({ kind: z.literal('now') }), z.object({ kind: z.literal('later'), at: z.string() })]),
      /tool when: its input must be an object schema \(z\.object\), not a union \(oneOf at the top level, which the Messages API refuses\); put it in a field/],
    ['a field name the Messages API refuses', z.object({ 'file path': z.string(), 'filter[id]': z.string(), ok: z.object({ 'a b': z.string() }) }),
      /tool when: the Messages API refuses the field names "file path", "filter\[id\]" of its input: a top-level field's name must match/],
    ['a field name past 64 characters', z.object({ ['x'.repeat(65)]: z.string() }), /tool when: the Messages API refuses the field name "x{65}"/],
  ])('defineAgent refuses an input with %s, naming the tool', (_label, input, reason) => {
    let error: unknown;
    try {
      defineAgent({ name: 'dated', tools: [withInput(input)] });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toMatch(reason);
  });

  it('a field with a default is not required of the model, and the step runs with the default filled in', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const seen: unknown[] = [];
    const copy = tool({
      name: 'copy_rows', description: 'Copy rows.', sideEffect: false, run: (input) => { seen.push(input); return 'copied'; },
      input: z.object({ table: z.string(), batch: z.number().int().default(100), where: z.object({ column: z.string(), op: z.string().default('=') }).optional() }),
    });
    const agent = defineAgent({ name: 'defaults', tools: [copy] });
    expect(toolSpecs(agent)[0]!.inputSchema).toMatchObject({
      required: ['table'], additionalProperties: false,
      properties: { batch: { default: 100 }, where: { required: ['column'], properties: { op: { default: '=' } } } },
    });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'copy_rows', input: { table: 'orders', where: { column: 'id' } } } : { kind: 'done', summary: 'copied' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    await start(deps);
    await drain(deps, runtime, clock);
    expect(seen).toEqual([{ table: 'orders', batch: 100, where: { column: 'id', op: '=' } }]);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', steps: [{ input: { table: 'orders', batch: 100, where: { column: 'id', op: '=' } } }] });
    runtime.close();
  });

  it('loadAgent refuses the module, before any run is touched', async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-agent-'));
    const path = join(dir, 'agent.ts');
    writeFileSync(path, [
      `import { z } from 'zod';`,
      `import { defineAgent, tool } from ${JSON.stringify(new URL('../../lib/agent.ts', import.meta.url).pathname)};`,
      `export default { name: 'dated', tools: [tool({ name: 'when', description: 'd', input: z.object({ at: z.date() }), sideEffect: false, run: () => 'ok' })] };`,
    ].join('\n'));
    await expect(loadAgent(path)).rejects.toThrow(/tool when: its input cannot be sent to the model as JSON Schema/);
  });

  it('an agent that skipped defineAgent fails its run at once with the reason, not after three transient failures', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const agent: AgentDefinition = { name: 'raw', tools: [withInput(z.object({ at: z.date() }))] };
    const model = new StubModel(writeRowsScript(1));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    await start(deps);
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({
      status: 'failed', failures: 1, reason: expect.stringMatching(/^step 1: tool when: its input cannot be sent to the model as JSON Schema/),
    });
    expect(model.requests).toHaveLength(0);
    runtime.close();
  });
});
