import { describe, expect, it } from 'vitest';
import { showText } from '../../lib/cli/format.ts';
import type { RunView } from '../../lib/engine/operate/show.ts';

const view = (output: string): RunView => ({
  runId: 'r', agent: 'a', goal: 'g', status: 'completed', version: 3, step: 1, stepCap: 60, failures: 0, atStep: 1,
  usage: { inputTokens: 0, outputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0 }, cost: { usd: 0, priced: false },
  steps: [{
    step: 1, tool: 'read_log', input: {}, at: 0, workerId: 'w', output,
    result: { ok: true, bytes: Buffer.byteLength(output), ref: 'sha256:ab', text: output.slice(0, 1000) },
  }],
});

describe('show as text', () => {
  it('writes the characters that hide or reorder text in a step\'s input and result as their escapes, cut or --full', () => {
    const hostile: RunView = { ...view('x'), steps: [{
      step: 1, tool: 'drop_table', input: { table: '\u202eswor_dlo', note: 'a\u2028b\u200bc' }, at: 0, workerId: 'w',
      result: { ok: true, bytes: 30, text: '{"dropped":"\u202eswor_dlo"}' },
    }] };
    for (const full of [false, true]) {
      const text = showText(hostile, 'claude-sonnet-4-5', { full });
      expect(text).toContain('  input   {"table":"\\u202eswor_dlo","note":"a\\u2028b\\u200bc"}');
      expect(text).toContain('  result  {"dropped":"\\u202eswor_dlo"}');
      expect(text).not.toMatch(/[\u202e\u2028\u200b]/);
    }
  });
});

describe('show --full as text', () => {
  it('prints an output of a few hundred thousand lines whole, each line indented', () => {
    // A 5 MB log: 400,000 lines.
    const output = Array.from({ length: 400_000 }, (_, i) => `line ${i}`).join('\n');
    const text = showText(view(output), 'claude-sonnet-4-5', { full: true });
    expect(text).toContain('  result  (');
    expect(text).toContain('\n    line 0\n    line 1\n');
    expect(text.endsWith('\n    line 399999')).toBe(true);
  });
});
