import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';

/**
 * The external system a side-effecting tool writes to. It outlives worker "processes" in a test, like a
 * real database would, and checks the idempotency key before writing (the seed's "check before writing").
 */
export class FakeRows {
  /** Every key the tool was called with, in order, including retries. */
  readonly received: string[] = [];
  /** Rows applied, by idempotency key. */
  readonly rows = new Map<string, number>();
  /** Every key whose call wrote a row, in order: a key twice here is an effect applied twice. */
  readonly applied: string[] = [];

  apply(key: string, row: number): { applied: boolean; rowCount: number } {
    this.received.push(key);
    const applied = !this.rows.has(key);
    if (applied) {
      this.rows.set(key, row);
      this.applied.push(key);
    }
    return { applied, rowCount: this.rows.size };
  }

  timesReceived(key: string): number {
    return this.received.filter((k) => k === key).length;
  }

  timesApplied(key: string): number {
    return this.applied.filter((k) => k === key).length;
  }
}

/** An agent with one side-effecting tool (write_row) and one read-only tool (count_rows). */
export interface RowsAgentOptions {
  stepCap?: number;
  /** Runs after the row is applied, before the tool returns: a test can hold a worker here. */
  afterWrite?: (step: number) => void | Promise<void>;
  /** Steps whose output is padded past the inline limit, so it goes to the blob store. */
  largeOutputAt?: number[];
}

export function rowsAgent(rows: FakeRows, options: RowsAgentOptions = {}): AgentDefinition {
  return defineAgent({
    name: 'rows-agent',
    settings: { ...(options.stepCap ? { stepCap: options.stepCap } : {}) },
    tools: [
      tool({
        name: 'write_row',
        description: 'Write one row to the table.',
        input: z.object({ row: z.number().int().positive() }),
        sideEffect: true,
        run: async (input, ctx) => {
          const result = rows.apply(ctx.idempotencyKey, input.row);
          await options.afterWrite?.(ctx.step);
          return options.largeOutputAt?.includes(ctx.step) ? { ...result, log: 'x'.repeat(10_000) } : result;
        },
      }),
      tool({
        name: 'count_rows',
        description: 'Count the rows in the table.',
        input: z.object({}),
        sideEffect: false,
        run: () => ({ rowCount: rows.rows.size }),
      }),
    ],
  });
}
