import { afterEach, describe, expect, it } from 'vitest';
import type { WaitRecord } from '../../lib/core/state.ts';
import { waitingHint } from '../../lib/cli/commands/run.ts';
import { agentFlag, storeFlags } from '../../lib/cli/context.ts';
import { answerCommand } from '../../lib/cli/format.ts';

/** The next commands the CLI prints: one wording for a wait's answer, one for the agent's flag. */
const base = { id: 'wait-0001', step: 2, tool: 't', input: {}, decidedAt: 0, startedAt: 0, deadline: Date.UTC(2026, 11, 6, 9, 0, 0) };
const approval: WaitRecord = { ...base, kind: 'approval', approvers: ['ops@example.com'] };
const event = { ...base, kind: 'event', event: { type: 'order.paid', key: 'order-7' } } as WaitRecord;
const sleep: WaitRecord = { ...base, kind: 'sleep' };

const saved = process.env.STEPWISE_AGENT;
afterEach(() => {
  if (saved === undefined) delete process.env.STEPWISE_AGENT;
  else process.env.STEPWISE_AGENT = saved;
});

describe('next-command hints', () => {
  it('a wait is answered by approve|reject or emit; a sleep by its time, which `run` gives', () => {
    expect(answerCommand('r1', approval)).toBe('stepwise approve|reject r1');
    expect(answerCommand('r1', event)).toBe('stepwise emit order.paid order-7 [json]');
    expect(answerCommand('r1', sleep)).toBeUndefined();
    expect(waitingHint(approval, 'r1', ' --agent a.ts')).toBe('answer with `stepwise approve|reject r1`, or open the link while `stepwise serve --agent a.ts` runs');
    expect(waitingHint(event, 'r1', ' --agent a.ts')).toBe('answer with `stepwise emit order.paid order-7 [json]`');
    expect(waitingHint(sleep, 'r1', ' --agent a.ts')).toBe('it wakes at 2026-12-06T09:00:00.000Z');
    // The store the run is in, when a flag chose it, goes with each command, quoted for the shell.
    const store = storeFlags({ db: "my runs/it's.db", backend: 'local' });
    expect(store).toBe(" --db 'my runs/it'\\''s.db' --backend local");
    expect(waitingHint(approval, 'r1', ' --agent a.ts', store)).toBe(`answer with \`stepwise approve|reject r1${store}\`, or open the link while \`stepwise serve --agent a.ts${store}\` runs`);
    expect(agentFlag({ agent: 'my agents/a.ts' })).toBe(" --agent 'my agents/a.ts'");
  });

  it('names the agent as given; none when STEPWISE_AGENT names it for the next command too; else a placeholder', () => {
    delete process.env.STEPWISE_AGENT;
    expect(agentFlag({ agent: 'a.ts' })).toBe(' --agent a.ts');
    expect(agentFlag({})).toBe(' --agent <path>');
    process.env.STEPWISE_AGENT = 'from-env.ts';
    expect(agentFlag({})).toBe('');
    expect(agentFlag({ agent: 'a.ts' })).toBe(' --agent a.ts');
  });
});
