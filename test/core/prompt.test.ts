import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { STEP_PROMPT, promptText, renderStepPrompt, stepLine } from '../../lib/core/prompt.ts';
import { shapeResult } from '../../lib/core/result.ts';
import { completeStep } from '../../lib/core/transitions.ts';
import { newState, recordFor, stateAfter } from '../support/states.ts';

const SEED = new URL('../../../shared/seed/checkpoint-and-resume.md', import.meta.url);

describe('the Step prompt', () => {
  it('is the seed document\'s Step prompt, word for word', () => {
    const seed = readFileSync(SEED, 'utf8');
    const block = /### Step prompt\s*```markdown\n([\s\S]*?)```/.exec(seed)?.[1];
    expect(block).toBeDefined();
    expect(STEP_PROMPT).toBe(block);
  });

  it('fills goal, completed steps and last result into the template and nothing else', () => {
    const state = stateAfter('r1', 2);
    const text = promptText(renderStepPrompt(state));
    const expected = STEP_PROMPT
      .replace('{{goal}}', state.goal)
      .replace('{{completed_steps}}', `${stepLine(state.steps[0]!)}\n${stepLine(state.steps[1]!)}`)
      .replace('{{last_tool_result}}', 'step 2 write_row -> ok:\nwrote row 2');
    expect(text).toBe(expected);
    expect(text).toContain('1. write_row {"batch":1} -> ok: wrote row 1');
  });

  it('says "(none yet)" before the first step', () => {
    const text = promptText(renderStepPrompt(newState('r2', 'do it')));
    expect(text).toContain('<completed_steps>\n(none yet)\n</completed_steps>');
    expect(text).toContain('<last_result>(none yet)</last_result>');
  });

  it('keeps step n\'s cache-marked prefix as the byte-identical start of step n+1\'s prompt', () => {
    for (let n = 1; n < 20; n++) {
      const blocks = renderStepPrompt(stateAfter('r3', n));
      const marked = blocks.findIndex((b) => b.cache);
      expect(marked).toBe(blocks.length - 2);
      const next = renderStepPrompt(stateAfter('r3', n + 1));
      // The cache matches whole blocks: every block up to the mark must reappear unchanged, in place.
      expect(next.slice(0, marked + 1)).toEqual(blocks.slice(0, marked + 1).map((b) => ({ text: b.text })));
      expect(promptText(next).startsWith(promptText(blocks.slice(0, marked + 1)))).toBe(true);
    }
  });

  it('shows a large output as a bounded excerpt plus its reference, in the step list and as the last result', () => {
    const big = 'y'.repeat(50_000);
    const shaped = shapeResult(big, true);
    expect(shaped.blob?.data.length).toBe(50_000);
    const record = { ...recordFor('r4', 1), result: shaped.result };
    const text = promptText(renderStepPrompt(completeStep(newState('r4'), record, 5)));
    expect(text.length).toBeLessThan(4000);
    expect(text).toContain(shaped.result.ref!);
    expect(text).toContain('the full output is 50000 bytes');
  });

  it('after an unusable reply, shows the last result and then the retry note', () => {
    const note = 'Your previous reply could not be used (no tool call).';
    const state = { ...stateAfter('r5', 1), retryNote: note };
    expect(promptText(renderStepPrompt(state))).toContain(`<last_result>step 1 write_row -> ok:\nwrote row 1\n\n${note}</last_result>`);
    // With no step done yet there is no result to keep: the note alone.
    expect(promptText(renderStepPrompt({ ...newState('r6'), retryNote: note }))).toContain(`<last_result>${note}</last_result>`);
  });
});
