import { describe, expect, it } from 'vitest';
import { runDetail, showText } from '../../lib/cli/format.ts';
import { beginWait, waitRecordFor } from '../../lib/core/waits.ts';
import type { RunView } from '../../lib/engine/operate/show.ts';
import { decisionFor, newState } from '../support/states.ts';

const decision = { ...decisionFor('r', 1), tool: 'request_approval' };
const approval = beginWait(newState('r'), waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop', timeoutMs: 60_000 }, decision, 'w1', 10_000), 10_000);
const sleep = beginWait(newState('r'), waitRecordFor({ kind: 'sleep', forMs: 60_000 }, decision, 'w2', 10_000), 10_000);
const waitingLine = (text: string) => text.split('\n').find((l) => l.startsWith('waiting  '));

describe("a waiting run's line in status and show", () => {
  it('before its deadline: what answers it', () => {
    expect(waitingLine(runDetail(approval, 2, '', {}, 69_999))).toMatch(/until 1970-01-01 00:01:10Z \(wait w1\); answer: stepwise approve\|reject r$/);
  });

  it('past its deadline: no answer is taken any more (an approval would be told "expired"); what moves it on is a worker', () => {
    const line = waitingLine(runDetail(approval, 2, '', {}, 70_000));
    expect(line).toMatch(/\(wait w1\); its deadline has passed: the next worker to take the run, or `stepwise run --agent <path> --run-id r`, resumes it with "timed out"$/);
    expect(line).not.toContain('stepwise approve');
    expect(waitingLine(runDetail(sleep, 2, '', {}, 70_000))).toMatch(/resumes it with "woke"$/);
    const view = { ...approval, version: 2, atStep: 0 } as unknown as RunView;
    expect(waitingLine(showText(view, '', { now: 70_000 }))).toMatch(/its deadline has passed/);
  });

  it('past its deadline on AWS: a worker, not `stepwise run`, which that backend refuses', () => {
    const expected = /\(wait w1\); its deadline has passed: the next worker to take the run resumes it with "timed out"$/;
    expect(waitingLine(runDetail(approval, 2, '', { backend: 'aws' }, 70_000))).toMatch(expected);
    const view = { ...approval, version: 2, atStep: 0 } as unknown as RunView;
    expect(waitingLine(showText(view, '', { now: 70_000, backend: 'aws' }))).toMatch(expected);
  });

  it('an approval shows the call it is asked for, so `stepwise approve` is not answered blind: a gated tool\'s approved call runs as shown', () => {
    const call = { ...decisionFor('r', 1), tool: 'drop_table', input: { table: '\u202eswor_dlo', rows: 'x'.repeat(400) } };
    const gated = beginWait(newState('r'), waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'Run drop_table' }, call, 'w3', 10_000), 10_000);
    const callLine = (text: string) => text.split('\n').find((l) => l.startsWith('call     '));
    // Cut to one line in status; whole in show --full. A turn of the writing direction shows as its escape.
    expect(callLine(runDetail(gated, 2, '', {}, 20_000))).toMatch(/^call     drop_table \{"table":"\\u202eswor_dlo","rows":"x{250,}\.\.\. \(\d+ B\)$/);
    const view = { ...gated, version: 2, atStep: 0 } as unknown as RunView;
    expect(callLine(showText(view, '', { now: 20_000, full: true }))).toBe(`call     drop_table {"table":"\\u202eswor_dlo","rows":"${'x'.repeat(400)}"}`);
    expect(callLine(runDetail(approval, 2, '', {}, 20_000))).toBe('call     request_approval {"batch":1}');
    expect(callLine(runDetail(sleep, 2, '', {}, 20_000))).toBeUndefined();
  });
});
