import { describe, expect, it } from 'vitest';
import { replyProblem } from '../../lib/core/model-reply.ts';

const usage = { inputTokens: 10, outputTokens: 2, cacheWriteTokens: 0, cacheReadTokens: 5 };

describe('a model reply the engine can record', () => {
  it('takes each kind of reply as the Model contract has it, usage and model optional', () => {
    for (const reply of [
      { kind: 'tool', tool: 'copy', input: { n: 1 } },
      { kind: 'tool', tool: 'copy', input: undefined, usage, model: 'm' },
      { kind: 'done', summary: 'ok', usage },
      { kind: 'invalid', reason: 'two tool calls' },
    ]) expect(replyProblem(reply), JSON.stringify(reply)).toBeUndefined();
  });

  it('names what is wrong: the kind, its field, each usage count, a field usage does not have', () => {
    const cases: [unknown, string][] = [
      [null, 'the reply is null, not an object'],
      ['DONE', 'the reply is string, not an object'],
      [{ tool: 'copy' }, 'kind must be "tool", "done" or "invalid", got undefined'],
      [{ kind: 'tool' }, 'a tool reply needs tool: string'],
      [{ kind: 'done', summary: 7 }, 'a done reply needs summary: string'],
      [{ kind: 'invalid' }, 'an invalid reply needs reason: string'],
      [{ kind: 'done', summary: 'ok', model: 3 }, 'model must be a string when given'],
      [{ kind: 'done', summary: 'ok', usage: 5 }, 'usage must be an object when given'],
      [{ kind: 'done', summary: 'ok', usage: { inputTokens: 100, outputTokens: 10 } }, 'usage.cacheWriteTokens must be a whole number from 0, got undefined'],
      [{ kind: 'done', summary: 'ok', usage: { ...usage, inputTokens: 1.5 } }, 'usage.inputTokens must be a whole number from 0, got 1.5'],
      [{ kind: 'done', summary: 'ok', usage: { ...usage, cacheReadTokens: -1 } }, 'usage.cacheReadTokens must be a whole number from 0, got -1'],
      [{ kind: 'done', summary: 'ok', usage: { ...usage, outputTokens: Number.NaN } }, 'usage.outputTokens must be a whole number from 0, got null'],
      [{ kind: 'done', summary: 'ok', usage: { ...usage, reasoningTokens: 3 } }, 'usage has fields other than inputTokens, outputTokens, cacheWriteTokens, cacheReadTokens'],
    ];
    for (const [reply, problem] of cases) expect(replyProblem(reply), JSON.stringify(reply)).toBe(problem);
  });
});
