import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, loadAgent, tool, toolSpecs, type AgentDefinition, type ToolContext } from '../../lib/agent.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { retryRun } from '../../lib/engine/operate/retry.ts';
import { ManualClock, SimulatedCrash, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const withInput = (input: z.ZodType) => tool({ name: 'when', description: 'takes a date', input, sideEffect: false, run: () => 'ok' });

// The file each test opens, removed after it, whichever describe it is in.
let db: ReturnType<typeof tempDb> | undefined;
afterEach(() => {
  db?.cleanup();
  db = undefined;
});

describe('a tool input that cannot be sent to the model is an error when the agent loads', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it.each([
    ['a date', z.object({ at: z.date() }),
      /tool when: its input cannot be sent to the model as JSON Schema: Date cannot be represented in JSON Schema \(for a date, take z\.iso\.datetime\(\) or z\.iso\.date\(\), with \.transform\(\(text\) => new Date\(text\)\) if the tool wants a Date\)$/],
    ['a coerced date', z.object({ at: z.coerce.date() }), /tool when: .*Date cannot be represented/],
    ['a bigint', z.object({ n: z.bigint() }), /tool when: .*BigInt cannot be represented/],
    ['a file, which JSON cannot carry', z.object({ report: z.object({ body: z.file().optional() }) }),
      /tool when: its input cannot be sent to the model as JSON Schema: a file \(z\.file\(\) at report\.body\) cannot be sent in JSON: take its path, URL or text as a string/],
    ['a promise', z.object({ later: z.promise(z.string()) }), /tool when: .*a promise \(z\.promise\(\) at later\) cannot be sent in JSON/],
    ['not an object', z.string(), /tool when: its input must be an object schema \(z\.object\), not "string"/],
    ['a union of objects', z.discriminatedUnion('kind', [z.object({ kind: z.literal('now') }), z.object({ kind: z.literal('later'), at: z.string() })]),
      /tool when: its input must be an object schema \(z\.object\), not a union \(oneOf at the top level, which the Messages API refuses\); put it in a field/],
    ['an intersection zod cannot merge into one object', z.object({ id: z.string() }).and(z.record(z.string(), z.string())),
      /tool when: its input must be an object schema \(z\.object\), not an intersection zod could not merge into one object \(allOf at the top level, which the Messages API refuses\); write it as one z\.object, with \.catchall\(\.\.\.\) for fields it does not name$/],
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

  it('a field with a default is not required of the model, and the tool gets it filled in (the step keeps the call as the model made it)', async () => {
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
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', steps: [{ input: { table: 'orders', where: { column: 'id' } } }] });
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

describe('a tool input the model sends in one form and the tool takes in another', () => {

  /** A send of an invoice: fields the model writes as text, which the tool takes as a boolean and a number. */
  const sendInput = z.object({
    invoice: z.string().trim(),
    urgent: z.stringbool(),
    copies: z.string().pipe(z.coerce.number<string>().int().min(1)),
    channel: z.enum(['email', 'post']).default('email'),
  });
  const sent = { invoice: 'INV-7 ', urgent: 'yes', copies: '2' };
  const parsed = { invoice: 'INV-7', urgent: true, copies: 2, channel: 'email' };
  const sendTool = (run: (input: z.output<typeof sendInput>, ctx: ToolContext) => unknown) => tool({ name: 'send', description: 'Send an invoice.', input: sendInput, sideEffect: true, run });

  it('the model is shown the form it sends: strings where the tool takes a boolean and a number', () => {
    const agent = defineAgent({ name: 'invoices', tools: [sendTool(() => 'sent')] });
    expect(toolSpecs(agent)[0]!.inputSchema).toEqual({
      type: 'object', required: ['invoice', 'urgent', 'copies'], additionalProperties: false,
      properties: { invoice: { type: 'string' }, urgent: { type: 'string' }, copies: { type: 'string' }, channel: { type: 'string', enum: ['email', 'post'], default: 'email' } },
    });
  });

  it('a decision recorded before a crash is the call as the model made it: the next try parses it again, the tool gets the same value under the same key', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const seen: { input: unknown; key: string }[] = [];
    const agent = defineAgent({ name: 'invoices', tools: [sendTool((input, ctx) => { seen.push({ input, key: ctx.idempotencyKey }); return ctx.once(async () => 'sent'); })] });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'send', input: sent } : { kind: 'done', summary: 'sent' });
    const first = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A', crashAt: { point: 'C3', step: 1 } });
    await start(first.deps);
    await expect(drain(first.deps, first.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    first.runtime.close();
    expect(seen).toEqual([]);

    const second = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'B' });
    await drain(second.deps, second.runtime, clock);
    expect(seen).toEqual([{ input: parsed, key: 'run/step-1' }]);
    expect(model.stepsAsked()).toEqual([1, 2]);
    expect(await loadState(second.runtime)).toMatchObject({ status: 'completed', steps: [{ input: sent, idempotencyKey: 'run/step-1', result: { ok: true, text: 'sent' } }] });
    second.runtime.close();
  });

  it('the tool gets the call as a retry reads it back: a record\'s keys in the same order, -0 and Infinity as JSON keeps them, on the first try as after a crash', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const seen: { keys: string[]; extra: unknown }[] = [];
    const agent = defineAgent({ name: 'columns', tools: [tool({
      name: 'insert', description: 'Insert a row, its columns in the order given.', sideEffect: true,
      input: z.object({ columns: z.record(z.string(), z.string()), extra: z.unknown() }),
      run: (input, ctx) => { seen.push({ keys: Object.keys(input.columns), extra: input.extra }); return ctx.once(async () => 'inserted'); },
    })] });
    // What JSON.parse makes of the model's {"zeta": .., "alpha": ..} and of `-0` and `1e400`.
    const call = { columns: { zeta: 'z', alpha: 'a' }, extra: { offset: -0, limit: Infinity } };
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'insert', input: call } : { kind: 'done', summary: 'inserted' });
    // Killed after the tool ran, before its checkpoint: the next try runs the recorded call again.
    const first = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'A', crashAt: { point: 'C4', step: 1 } });
    await start(first.deps);
    await expect(drain(first.deps, first.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    first.runtime.close();
    const second = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'B' });
    await drain(second.deps, second.runtime, clock);
    expect(seen).toHaveLength(2);
    expect(seen[0]).toStrictEqual(seen[1]);
    expect(seen[1]).toStrictEqual({ keys: ['alpha', 'zeta'], extra: { limit: null, offset: 0 } });
    second.runtime.close();
  });

  it('arguments that do not parse are an answer for the model naming the fields, and the run goes on', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const agent = defineAgent({ name: 'invoices', tools: [sendTool(() => 'sent')] });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'send', input: { ...sent, urgent: 'perhaps', copies: 'two' } } : { kind: 'done', summary: 'gave up' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    await start(deps);
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', steps: [{ result: { ok: false, text: expect.stringMatching(/^invalid arguments for send: urgent: .*; copies: /) } }] });
    runtime.close();
  });

  it('a transform is described by what it takes: the model sends an ISO date, the tool gets a Date', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const seen: unknown[] = [];
    const due = tool({
      name: 'set_due', description: 'Set the due date.', sideEffect: false, run: (input) => { seen.push(input); return 'set'; },
      input: z.object({ day: z.iso.date().transform((day) => new Date(`${day}T00:00:00Z`)).describe('the day it is due') }),
    });
    const agent = defineAgent({ name: 'due', tools: [due] });
    expect(toolSpecs(agent)[0]!.inputSchema).toMatchObject({ required: ['day'], properties: { day: { type: 'string', format: 'date', description: 'the day it is due' } } });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'set_due', input: { day: '2030-01-31' } } : { kind: 'done', summary: 'set' });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent, model, clock, workerId: 'W' });
    await start(deps);
    await drain(deps, runtime, clock);
    expect(seen).toEqual([{ day: new Date('2030-01-31T00:00:00Z') }]);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', steps: [{ input: { day: '2030-01-31' } }] });
    runtime.close();
  });
});

describe('an input schema that throws or checks asynchronously', () => {

  function runOf(input: z.ZodType, sent: unknown, options: { sideEffect?: boolean; crashAt?: 'C3' } = {}) {
    db = tempDb();
    const clock = new ManualClock();
    const seen: unknown[] = [];
    const query = tool({ name: 'query', description: 'Query a table.', input, sideEffect: options.sideEffect ?? false, run: (parsed) => { seen.push(parsed); return 'rows'; } });
    const agent = defineAgent({ name: 'tables', tools: [query] });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'query', input: sent, usage: { inputTokens: 10, outputTokens: 5, cacheWriteTokens: 0, cacheReadTokens: 0 } } : { kind: 'done', summary: 'done' });
    const worker = (workerId: string, crashAt?: 'C3') => workerProcess({ dbPath: db!.path, agent, model, clock, workerId, ...(crashAt ? { crashAt: { point: crashAt, step: 1 } } : {}) });
    return { clock, seen, model, worker };
  }

  it('a refinement that checks asynchronously (a table that must exist) is awaited, its issue an answer for the model', async () => {
    const tables = new Set(['orders']);
    const input = z.object({ table: z.string().refine(async (name) => tables.has(name), 'no such table') });
    const { clock, seen, worker } = runOf(input, { table: 'order' });
    const { deps, runtime } = worker('W');
    await start(deps);
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', failures: 0, steps: [{ result: { ok: false, text: 'invalid arguments for query: table: no such table' } }] });
    expect(seen).toEqual([]);
    runtime.close();
  });

  it('and a side-effecting step whose decision was recorded before a crash runs on the next try', async () => {
    const input = z.object({ table: z.string().refine(async (name) => name === 'orders', 'no such table') });
    const { clock, seen, worker } = runOf(input, { table: 'orders' }, { sideEffect: true });
    const first = worker('A', 'C3');
    await start(first.deps);
    await expect(drain(first.deps, first.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    first.runtime.close();
    const { deps, runtime } = worker('B');
    await drain(deps, runtime, clock);
    expect(await loadState(runtime)).toMatchObject({ status: 'completed', failures: 0, steps: [{ result: { ok: true, text: 'rows' } }] });
    expect(seen).toEqual([{ table: 'orders' }]);
    runtime.close();
  });

  it('a check that reads what the call itself changes (a table it drops) fails its retry after a crash saying so, not as code drift; moved into the tool, the retry gets the effect\'s result', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const tables = new Set(['orders', 'old_orders']);
    let drops = 0;
    const dropTable = (input: z.ZodType<{ table: string }>) => tool({
      name: 'drop_table', description: 'Drop a table.', sideEffect: true, input,
      run: (call, ctx) => ctx.once(async () => { drops += 1; tables.delete(call.table); return `dropped ${call.table}`; }),
    });
    const checked = defineAgent({ name: 'tables', tools: [dropTable(z.object({ table: z.string().refine(async (name) => tables.has(name), 'no such table') }))] });
    const model = new StubModel((step) => step === 1 ? { kind: 'tool', tool: 'drop_table', input: { table: 'old_orders' } } : { kind: 'done', summary: 'dropped' });
    // Killed after the drop, before its checkpoint: the retry parses the recorded call again, and the table is gone.
    const first = workerProcess({ dbPath: db.path, agent: checked, model, clock, workerId: 'A', crashAt: { point: 'C4', step: 1 } });
    await start(first.deps);
    await expect(drain(first.deps, first.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    first.runtime.close();
    const second = workerProcess({ dbPath: db.path, agent: checked, model, clock, workerId: 'B' });
    await drain(second.deps, second.runtime, clock);
    expect(await loadState(second.runtime)).toMatchObject({
      status: 'failed', step: 0,
      reason: 'step 1: the recorded decision for tool "drop_table" fails a check of its input schema (table: no such table), its fields still fitting: a check that reads outside state (a refine that looks a table up) is made again at every try, and a try after a crash finds that state as the call\'s own effect may have left it; redeploy an agent whose "drop_table" makes that check in its run (a ToolError answers the model), then `stepwise retry run`',
    });
    second.runtime.close();

    const moved = defineAgent({ name: 'tables', tools: [dropTable(z.object({ table: z.string() }))] });
    const third = workerProcess({ dbPath: db.path, agent: moved, model, clock, workerId: 'C' });
    await retryRun(third.deps, 'run', {});
    await drain(third.deps, third.runtime, clock);
    expect(await loadState(third.runtime)).toMatchObject({ status: 'completed', steps: [{ result: { ok: true, text: 'dropped old_orders' } }] });
    expect(drops).toBe(1);
    third.runtime.close();
  });

  it('a transform that throws fails the try with what it threw, naming the tool, its model call counted: not a crash of the worker', async () => {
    const input = z.object({ filter: z.string().transform((text) => JSON.parse(text) as unknown) });
    const { clock, seen, model, worker } = runOf(input, { filter: '{column: 1}' });
    const { deps, runtime } = worker('W');
    await start(deps);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    expect(state).toMatchObject({
      status: 'failed', failures: 3,
      reason: expect.stringMatching(/^step 1 failed 3 times; last error: tool query: its input schema threw on the model's arguments \(a refine or transform should report a bad input with ctx\.addIssue\): Expected property name .* in JSON at position 1$/),
    });
    expect(state.usage).toMatchObject({ inputTokens: 30, outputTokens: 15 });
    expect(model.stepsAsked()).toEqual([1, 1, 1]);
    expect(seen).toEqual([]);
    runtime.close();
  });
});
