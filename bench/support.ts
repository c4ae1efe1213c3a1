import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../lib/agent.ts';
import type { EngineDeps } from '../lib/engine/deps.ts';
import { silentLogger } from '../lib/log.ts';
import { openLocalRuntime, type LocalRuntime } from '../lib/local/runtime.ts';
import type { Model, ModelReply } from '../lib/ports.ts';
import { systemClock } from '../lib/ports.ts';

export function tempDir(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-bench-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A model that answers instantly: the engine's own cost is what is left. */
export function instantModel(tool: string, input: unknown = {}): Model {
  return { name: 'instant', decide: async (): Promise<ModelReply> => ({ kind: 'tool', tool, input }) };
}

/**
 * One no-op tool; `outputBytes` makes each step return that many bytes, different per step: `output`
 * makes them (default: the step number padded with one repeated letter).
 */
export function noopAgent(options: { sideEffect: boolean; outputBytes?: number; stepCap?: number; output?: (step: number, bytes: number) => string }): AgentDefinition {
  const output = options.output ?? ((step: number, bytes: number) => `step ${step} `.padEnd(bytes, 'o'));
  return defineAgent({
    name: 'bench', settings: { stepCap: options.stepCap ?? 1_000_000 },
    tools: [tool({ name: 'noop', description: 'does nothing', input: z.object({}), sideEffect: options.sideEffect, run: (_input, ctx) => (options.outputBytes ? output(ctx.step, options.outputBytes) : 'ok') })],
  });
}

export function benchDeps(runtime: LocalRuntime, agent: AgentDefinition, model: Model): EngineDeps {
  return {
    store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model, agent,
    clock: systemClock, workerId: 'bench', codeVersion: 'bench', log: silentLogger,
  };
}

export function openBenchRuntime(dir: string, name: string): LocalRuntime {
  return openLocalRuntime({ dbPath: join(dir, `${name}.db`) });
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

export const fmt = (n: number, digits = 1): string => n.toFixed(digits);
