import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import { promptText } from '../../lib/core/prompt.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';
import { requestApproval, sleepUntil, waitForEvent } from '../../lib/waits/tools.ts';
import { FakeRows } from './fake-tool.ts';
import { completedSteps } from './stub-model.ts';

export const APPROVER = 'ops@example.com';

/**
 * An agent that asks before its risky step: copy rows, request approval, then drop the old table only
 * if approved. Plus an event wait and a sleep, for the other kinds.
 */
export function waitAgent(rows: FakeRows, dropped: string[], settings?: AgentDefinition['settings'], approvers = [APPROVER]): AgentDefinition {
  return defineAgent({
    name: 'wait-agent',
    ...(settings ? { settings } : {}),
    tools: [
      tool({
        name: 'write_row', description: 'Write one row.', input: z.object({ row: z.number().int().positive() }), sideEffect: true,
        run: (input, ctx) => rows.apply(ctx.idempotencyKey, input.row),
      }),
      tool({
        name: 'drop_table', description: 'Drop a table: irreversible.', input: z.object({ table: z.string() }), sideEffect: true,
        run: (input, ctx) => {
          dropped.push(`${ctx.idempotencyKey}:${input.table}`);
          return { dropped: input.table };
        },
      }),
      requestApproval({ approvers, timeoutMs: 3_600_000 }),
      waitForEvent({ maxTimeoutMs: 600_000 }),
      sleepUntil({ maxMs: 86_400_000 }),
    ],
  });
}

/**
 * The model of the approval flow, deciding from the prompt as a real one would: write a row, ask for
 * approval to drop the old table, then drop it if the last result says approved, else finish.
 */
export class ApprovalFlowModel implements Model {
  readonly name = 'approval-flow';
  readonly prompts: string[] = [];
  constructor(private readonly request = 'Drop table old_rows after the copy') {}

  async decide(request: ModelRequest): Promise<ModelReply> {
    const prompt = promptText(request.prompt);
    this.prompts.push(prompt);
    const step = completedSteps(prompt) + 1;
    const last = prompt.slice(prompt.indexOf('<last_result>'));
    if (step === 1) return { kind: 'tool', tool: 'write_row', input: { row: 1 } };
    if (step === 2) return { kind: 'tool', tool: 'request_approval', input: { request: this.request, details: 'DROP TABLE old_rows' } };
    if (step === 3 && last.includes('"approval":"approved"')) return { kind: 'tool', tool: 'drop_table', input: { table: 'old_rows' } };
    if (step === 3 && last.includes('"approval":"rejected"')) return { kind: 'done', summary: 'Rejected: old_rows kept.' };
    if (step === 3 && last.includes('"timedOut":true')) return { kind: 'done', summary: 'Nobody approved in time: old_rows kept.' };
    return { kind: 'done', summary: 'Copied and dropped old_rows.' };
  }
}

/** A model that waits for one event (or sleeps), then reports what it saw. */
export class OneWaitModel implements Model {
  readonly name = 'one-wait';
  readonly prompts: string[] = [];
  constructor(private readonly first: ModelReply) {}

  async decide(request: ModelRequest): Promise<ModelReply> {
    const prompt = promptText(request.prompt);
    this.prompts.push(prompt);
    if (completedSteps(prompt) === 0) return this.first;
    const last = prompt.slice(prompt.indexOf('<last_result>') + 13, prompt.indexOf('</last_result>'));
    return { kind: 'done', summary: `saw: ${last.replace(/\s+/g, ' ')}` };
  }
}
