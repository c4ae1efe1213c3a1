import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type ToolDefinition } from '../../lib/agent.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';

const echo = tool({ name: 'echo', description: 'Echo.', input: z.object({ text: z.string() }), sideEffect: false, run: ({ text }) => text });
const agentWith = (overrides: Record<string, unknown>) => () => defineAgent({ name: 'a', tools: [echo], ...overrides } as never);

describe('defineAgent refuses, when the agent loads, what would fail every run', () => {
  it.each([
    ['no name', { name: '' }, 'an agent needs a name'],
    ['tools that are not an array', { tools: echo }, 'agent a: tools must be an array of tool({...})'],
    ['a tool twice', { tools: [echo, echo] }, 'tool echo is defined twice'],
    ['a tool name the API refuses', { tools: [{ ...echo, name: 'has space' }] }, 'tool name "has space" must match'],
    ['a tool without an input schema', { tools: [{ ...echo, input: undefined }] }, 'tool echo: input must be a zod schema (input: z.object({...}))'],
    ['a tool input that is not an object', { tools: [{ ...echo, input: z.string() }] }, 'tool echo: its input must be an object schema (z.object), not "string"'],
    ['a tool without run', { tools: [{ ...echo, run: 'echo' }] }, 'tool echo: run must be a function'],
    ['a tool that does not say whether it has a side effect (JavaScript)', { tools: [{ ...echo, sideEffect: undefined }] }, 'tool echo: sideEffect must be true (it changes something'],
    ['a step cap of 0', { settings: { stepCap: 0 } }, 'agent a: settings.stepCap must be a whole number from 1 to 9007199254740991, got 0'],
    ['a fractional step cap', { settings: { stepCap: 2.5 } }, 'agent a: settings.stepCap must be a whole number from 1 to 9007199254740991, got 2.5'],
    // An integer to Number.isInteger, written in each run's head, which the head's schema then refused: the run failed as unreadable at its first step.
    ['a step cap of 1e308 for "no limit"', { settings: { stepCap: 1e308 } }, 'agent a: settings.stepCap must be a whole number from 1 to 9007199254740991, got 1e+308'],
    ['a negative inline limit', { settings: { inlineLimit: -1 } }, 'agent a: settings.inlineLimit must be a whole number of bytes from 0 to 262144, got -1'],
    ['an inline limit that puts outputs of megabytes in every prompt', { settings: { inlineLimit: 10_000_000 } }, 'agent a: settings.inlineLimit must be a whole number of bytes from 0 to 262144, got 10000000'],
    // Each would fail every start, or start every run without the limit it meant.
    ['a token budget of 0', { settings: { budget: { tokens: 0 } } }, 'agent a: settings.budget must be { tokens?, usd? } with at least one (tokens a whole number above 0, usd a number above 0), got {"tokens":0}'],
    ['a dollar budget as text', { settings: { budget: { usd: '5' } } }, 'agent a: settings.budget must be { tokens?, usd? } with at least one'],
    ['a misspelt budget', { settings: { budget: { dollars: 5 } } }, 'got {"dollars":5}'],
    ['an empty budget', { settings: { budget: {} } }, 'agent a: settings.budget must be { tokens?, usd? } with at least one'],
    // Sent with every model call: the API would refuse each run's first step.
    ['an empty model id', { settings: { model: ' ' } }, 'agent a: settings.model must be a model id such as "claude-opus-5-5", got " "'],
    ['a max tokens of 0', { settings: { maxTokens: 0 } }, 'agent a: settings.maxTokens must be a whole number from 1, got 0'],
    ['max tokens as text', { settings: { maxTokens: '4096' } }, 'agent a: settings.maxTokens must be a whole number from 1, got "4096"'],
    ['a negative temperature', { settings: { temperature: -0.5 } }, 'agent a: settings.temperature must be a number from 0, got -0.5'],
    // Deployed all the same (a rule made from each trigger at synth), each failed or never matched every event, a log line apiece.
    ['a trigger written as an EventBridge pattern (JavaScript)', { startOn: [{ source: ['aws.s3'], goal: (): string => 'x' }] }, 'agent a: startOn trigger 0: source must be one string, matched exactly, not ["aws.s3"]: give a trigger for each'],
    ['a trigger with detail-type (JavaScript)', { startOn: [{ source: 'aws.s3', 'detail-type': 'Object Created', goal: (): string => 'x' }] }, 'agent a: startOn trigger 0 has a field "detail-type" (written detailType here): a trigger has source, detailType and goal'],
    ['a trigger with an empty detail type', { startOn: [{ source: 'aws.s3', detailType: '' }] }, 'agent a: startOn trigger 0: detailType must be one string, matched exactly, not ""'],
    ['a trigger whose goal is text', { startOn: [{ source: 'aws.s3', goal: 'Process the file' }] }, "agent a: startOn trigger 0: goal must be a function (event) => the run's goal, or undefined to start none"],
    ['triggers that are not an array', { startOn: { source: 'aws.s3', goal: (): string => 'x' } }, 'agent a: startOn must be an array of triggers'],
    ['an eventKey that is not a function', { eventKey: { type: 'order.paid' } }, 'agent a: eventKey must be a function (event) => ({ type, key }) or undefined'],
  ])('%s', (_what, overrides, message) => {
    expect(agentWith(overrides)).toThrow(InvalidInputError);
    expect(agentWith(overrides)).toThrow(message);
  });

  it('takes the settings at their edges: a cap of 1, every output by reference', () => {
    const settings = { stepCap: 1, inlineLimit: 0, budget: { tokens: 1, usd: 0.01 }, model: 'claude-haiku-4-5', maxTokens: 1, temperature: 0 };
    const agent = defineAgent({ name: 'a', tools: [echo as ToolDefinition], settings });
    expect(agent.settings).toEqual(settings);
  });
});

describe("defineAgent refuses a name that a run could not keep or AWS could not take", () => {
  it.each([
    // Recorded as a number, the run's first checkpoint could not be read by any worker.
    ['a number (a JavaScript agent)', 5, "an agent's name is text, not a number (5)"],
    ['only spaces', '   ', 'agent name "   " has a space at its start or end'],
    ['a space at the end (a pasted name)', 'copy-rows ', 'agent name "copy-rows " has a space at its start or end'],
    ['a newline', 'copy\nrows', 'agent name "copy\\nrows" holds "\\n" (U+000A), which is not printable ASCII'],
    ['a NUL byte', 'a\u0000b', 'holds "\\u0000" (U+0000)'],
    ['an emoji, which no CloudWatch dimension takes', 'rows 🚀', 'holds "🚀" (U+1F680), which is not printable ASCII'],
    ['an accent written as a combining mark', 'cafe\u0301', 'holds "\u0301" (U+0301)'],
    // A Lambda function's description ("stepwise <name>: ...") is at most 256 characters.
    ['129 characters', 'a'.repeat(129), 'is 129 characters; the limit is 128'],
    ['100 KB', 'a'.repeat(100_000), `agent name "${'a'.repeat(80)}..." is 100000 characters; the limit is 128`],
  ])('%s', (_what, name, message) => {
    expect(agentWith({ name })).toThrow(InvalidInputError);
    expect(agentWith({ name })).toThrow(message);
    if (typeof name === 'string') expect(agentWith({ name })).toThrow('runs recorded under an earlier name are taken over with formerNames');
  });

  it('takes 128 characters, spaces inside and punctuation, and any string as a former name', () => {
    for (const name of ['a'.repeat(128), 'Copy Rows v2', 'ops/copy-rows@2', '5']) expect(defineAgent({ name, tools: [echo as ToolDefinition] }).name).toBe(name);
    expect(defineAgent({ name: 'copy-rows', formerNames: ['café rows '], tools: [echo as ToolDefinition] }).formerNames).toEqual(['café rows ']);
  });
});
