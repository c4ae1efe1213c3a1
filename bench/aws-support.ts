import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../lib/agent.ts';
import type { Model, ModelReply } from '../lib/ports.ts';

/**
 * The benchmark agent: odd steps write a row through the idempotency ledger (side effect, decision
 * recorded), even steps read (no decision); every `largeEvery`-th step returns `largeBytes` of output,
 * which goes to the blob store. The model answers instantly, so what is measured is the runtime; with
 * `modelMs` it takes that long to decide, as a remote model's reply would.
 */
export function benchAgent(options: { steps: number; largeEvery?: number; largeBytes?: number; modelMs?: number }): { agent: AgentDefinition; model: () => Model } {
  const agent = defineAgent({
    name: 'aws-bench',
    settings: { stepCap: options.steps + 10 },
    tools: [
      tool({
        name: 'write_row', description: 'Writes one row.', sideEffect: true,
        input: z.object({ batch: z.number() }),
        run: (input, context) => context.once(async () => `wrote row ${input.batch}`),
      }),
      tool({
        name: 'read_rows', description: 'Reads a page of rows.', sideEffect: false,
        input: z.object({ page: z.number() }),
        run: (input, context) => (options.largeEvery && context.step % options.largeEvery === 0
          ? `page ${input.page}: `.padEnd(options.largeBytes ?? 20_000, 'r')
          : `page ${input.page}: 3 rows`),
      }),
    ],
  });
  const model = (): Model => ({
    name: 'instant',
    decide: async (request): Promise<ModelReply> => {
      if (options.modelMs) await new Promise((resolve) => setTimeout(resolve, options.modelMs));
      if (request.step > options.steps) return { kind: 'done', summary: `did ${options.steps} steps` };
      return request.step % 2
        ? { kind: 'tool', tool: 'write_row', input: { batch: request.step } }
        : { kind: 'tool', tool: 'read_rows', input: { page: request.step } };
    },
  });
  return { agent, model };
}

/** DynamoDB's size rules for an item in wire format (AttributeValue maps), as returned by a raw Query. */
export function rawItemSize(item: Record<string, unknown>): number {
  let total = 0;
  for (const [name, value] of Object.entries(item)) total += Buffer.byteLength(name) + rawValueSize(value as Record<string, unknown>);
  return total;
}

function rawValueSize(value: Record<string, unknown>): number {
  if ('S' in value) return Buffer.byteLength(String(value.S));
  if ('N' in value) return Math.ceil(String(value.N).replace(/[-.]/g, '').replace(/^0+/, '').length / 2) + 1;
  if ('BOOL' in value || 'NULL' in value) return 1;
  if ('M' in value) return 3 + Object.entries(value.M as Record<string, unknown>).reduce((n, [k, v]) => n + 1 + Buffer.byteLength(k) + rawValueSize(v as Record<string, unknown>), 0);
  if ('L' in value) return 3 + (value.L as Record<string, unknown>[]).reduce((n, v) => n + 1 + rawValueSize(v), 0);
  return 0;
}

export const perStep = (count: number, steps: number): string => (count / steps).toFixed(2);
