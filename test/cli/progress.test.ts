import { describe, expect, it } from 'vitest';
import { recordFailure } from '../../lib/core/transitions.ts';
import { ModelUnavailableError } from '../../lib/core/errors.ts';
import { progressLine } from '../../lib/cli/progress.ts';
import { runDetail } from '../../lib/cli/format.ts';
import { complete, completeStep } from '../../lib/core/transitions.ts';
import { newState, recordFor, stateAfter } from '../support/states.ts';

/** The lines `run` and `worker` print per checkpoint: a failed try says when the next comes. */
describe('progress lines', () => {
  it('a failed try says which, why, and in how long the step is tried again (the queue\'s backoff)', () => {
    let state = stateAfter('r', 1);
    const lines: string[] = [];
    for (let n = 1; n <= 8; n++) {
      state = recordFailure(state, new ModelUnavailableError('the Anthropic API failed: 529 overloaded_error: Overloaded, after retries'), n);
      lines.push(progressLine({ action: 'ack', outcome: { kind: 'advanced', version: n + 2, state, bytes: 300 } })!);
    }
    expect(lines[0]).toBe('run r v3  step 2 attempt 1 failed: the Anthropic API failed: 529 overloaded_error: Overloaded, after retries (will retry in 1 s)');
    expect(lines.map((l) => /in (\d+) s\)$/.exec(l)![1])).toEqual(['1', '2', '4', '8', '16', '32', '60', '60']);
    expect(state.status).toBe('running');
  });

  it("a try that finds the step's key held by an earlier one says so, until when, and when it tries again", () => {
    const leaseUntil = Date.parse('2026-12-05T23:01:00.000Z');
    expect(progressLine({ action: 'release', delayMs: 57_400, runId: 'k2', busy: { key: 'k2/step-3', leaseUntil } }))
      .toBe('run k2  key k2/step-3 is held by an earlier try until 2026-12-05T23:01:00.000Z (its worker may have stopped inside the effect): trying again in 58 s');
    // A release for another reason (a wrong agent, a refused key) prints nothing here: the log says it.
    expect(progressLine({ action: 'release', delayMs: 60_000, runId: 'k2' })).toBeUndefined();
  });

  it('cuts a step\'s output before an emoji the cut would split, in the progress line and in status\'s step table', () => {
    // 69 letters then an emoji: the progress line's 70 units end inside it; 59 for the table's 60.
    const text = `${'a'.repeat(59)}😀${'b'.repeat(9)}😀 and more`;
    const state = completeStep(newState('e'), recordFor('e', 1, text), 3_001);
    const line = progressLine({ action: 'ack', outcome: { kind: 'advanced', version: 2, state, bytes: 300 } })!;
    expect(line).toContain(`ok: ${'a'.repeat(59)}😀${'b'.repeat(9)}  (300 B`);
    expect(line.isWellFormed()).toBe(true);
    const detail = runDetail(state, 2);
    expect(detail).toContain(`ok: ${'a'.repeat(59)} `);
    expect(detail.isWellFormed()).toBe(true);
  });

  it('keeps a step to one line when its error, reason or summary spans lines (a tool\'s error, a zod issue list)', () => {
    const error = new Error('first line\nsecond line\r\n\tindented');
    let state = recordFailure(stateAfter('m', 1), error, 1);
    const lines = [progressLine({ action: 'ack', outcome: { kind: 'advanced', version: 3, state, bytes: 300 } })!];
    state = recordFailure(recordFailure(state, error, 2), error, 3);
    expect(state.status).toBe('failed');
    lines.push(progressLine({ action: 'ack', outcome: { kind: 'advanced', version: 5, state, bytes: 300 } })!);
    const done = complete(stateAfter('m', 1), 'Copied the rows.\n\n- 1,000 rows\n- no duplicates', undefined, 4);
    lines.push(progressLine({ action: 'ack', outcome: { kind: 'advanced', version: 3, state: done, bytes: 300 } })!);
    expect(lines).toEqual([
      'run m v3  step 2 attempt 1 failed: first line\\nsecond line\\n\\tindented (will retry in 1 s)',
      'run m v5  failed: step 2 failed 3 times; last error: first line\\nsecond line\\n\\tindented',
      'run m v3  completed after 1 step: Copied the rows.\\n\\n- 1,000 rows\\n- no duplicates',
    ]);
  });
});
