import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { promptText } from '../../lib/core/prompt.ts';

/**
 * A stub LLM: answers each step from a script function and records what it was asked. It decides from
 * the prompt it is sent (the number of completed steps listed), not from hidden memory, as a real model
 * resumed on another worker would.
 */
export class StubModel implements Model {
  readonly name = 'stub';
  readonly requests: { step: number; prompt: string }[] = [];

  constructor(private readonly script: (step: number, prompt: string) => ModelReply) {}

  async decide(request: ModelRequest): Promise<ModelReply> {
    const prompt = promptText(request.prompt);
    this.requests.push({ step: request.step, prompt });
    return this.script(completedSteps(prompt) + 1, prompt);
  }

  stepsAsked(): number[] {
    return this.requests.map((r) => r.step);
  }
}

/** How many steps the prompt lists as completed. */
export function completedSteps(prompt: string): number {
  const section = prompt.slice(prompt.indexOf('<completed_steps>\n') + 18, prompt.indexOf('\n</completed_steps>'));
  return section === '(none yet)' ? 0 : section.split('\n').length;
}

/** Writes rows 1..total, one per step, then says DONE. */
export function writeRowsScript(total: number) {
  return (step: number): ModelReply => step <= total
    ? { kind: 'tool', tool: 'write_row', input: { row: step }, usage: { inputTokens: 100, outputTokens: 20, cacheWriteTokens: 0, cacheReadTokens: 0 } }
    : { kind: 'done', summary: `Wrote ${total} rows, one per step.` };
}
