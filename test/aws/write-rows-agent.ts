import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';

/**
 * An external system for the crash tests: it outlives every simulated worker process, records every key
 * a tool call brought, and counts how often each key was really applied.
 */
export class FakeDatabase {
  readonly received: string[] = [];
  readonly applied = new Map<string, number>();
  private readonly rows = new Map<string, number>();

  apply(key: string, batch: number): string {
    this.applied.set(key, (this.applied.get(key) ?? 0) + 1);
    this.rows.set(key, batch);
    return `wrote row ${batch}`;
  }

  get rowCount(): number {
    return this.rows.size;
  }

  receivedCount(key: string): number {
    return this.received.filter((k) => k === key).length;
  }
}

export interface ScriptOptions {
  /** Steps that call write_row before the model says DONE. */
  steps: number;
  /** A step's input payload (to make inputs large). */
  payload?: (step: number) => string | undefined;
  /** A DONE summary (to make heads large). */
  summary?: string;
}

/** The stub LLM: step n asks write_row for batch n until the plan is done, then DONE. */
export class ScriptedModel implements Model {
  readonly name = 'scripted-stub';
  /** The step of every call, in order: a step asked twice shows up twice. */
  readonly calls: number[] = [];
  readonly requests: ModelRequest[] = [];

  constructor(private readonly script: ScriptOptions) {}

  async decide(request: ModelRequest): Promise<ModelReply> {
    this.calls.push(request.step);
    this.requests.push(request);
    if (request.step > this.script.steps) return { kind: 'done', summary: this.script.summary ?? `wrote ${this.script.steps} rows` };
    const payload = this.script.payload?.(request.step);
    return { kind: 'tool', tool: 'write_row', input: { batch: request.step, ...(payload !== undefined ? { payload } : {}) } };
  }

  callsFor(step: number): number {
    return this.calls.filter((s) => s === step).length;
  }
}

export interface WriteRowsOptions {
  /** Bytes of output a step returns (beyond the engine's inline limit it goes to the blob store). */
  outputBytes?: (step: number) => number;
  inlineLimit?: number;
}

/** Repeatable filler: the same step always returns the same bytes. */
export function filler(step: number, bytes: number): string {
  const unit = `row ${step} data;`;
  return unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes);
}

/** One side-effecting tool that applies its row through the idempotency ledger, keyed run/step-n. */
export function writeRowsAgent(db: FakeDatabase, options: WriteRowsOptions = {}): AgentDefinition {
  return defineAgent({
    name: 'write-rows',
    settings: { stepCap: 60, ...(options.inlineLimit !== undefined ? { inlineLimit: options.inlineLimit } : {}) },
    tools: [
      tool({
        name: 'write_row',
        description: 'Writes one batch of rows to the target table.',
        input: z.object({ batch: z.number().int().positive(), payload: z.string().optional() }),
        sideEffect: true,
        run: async (input, context) => {
          db.received.push(context.idempotencyKey);
          const written = await context.once(async () => db.apply(context.idempotencyKey, input.batch));
          const extra = options.outputBytes?.(context.step) ?? 0;
          return extra > 0 ? `${written}\n${filler(context.step, extra)}` : written;
        },
      }),
    ],
  });
}
