import type { z } from 'zod';
import { failureText } from './failure-text.ts';
import type { Decision } from './state.ts';
import { parseToolInput } from './tool-input.ts';

/** What drift checks of an agent: its name and its tools' names and input schemas. */
export interface ToolsOf<T extends { name: string; input: z.ZodType }> {
  name: string;
  tools: readonly T[];
}

/**
 * Whether a recorded decision can still run under this agent: its tool must exist, and its recorded input
 * must still fit the tool's input schema. A decision is never re-asked of the model or changed to fit
 * (its idempotency key belongs to this exact call), so when it cannot run, the fix is to redeploy an agent
 * that can run it and retry the run. Used by the engine before it runs a recorded decision, and by
 * `stepwise drift` before a deploy.
 */
export async function checkDecision<T extends { name: string; input: z.ZodType }>(decision: Decision, agent: ToolsOf<T>, runId: string):
  Promise<{ ok: true; tool: T; input: unknown } | { ok: false; problem: string }> {
  const retry = `then \`stepwise retry ${runId}\``;
  const tool = agent.tools.find((t) => t.name === decision.tool);
  if (!tool) {
    return {
      ok: false,
      problem: `the recorded decision calls tool "${decision.tool}", which agent ${agent.name} no longer has (renamed or removed): redeploy an agent with tool "${decision.tool}", ${retry}`,
    };
  }
  const parsed = await parseToolInput(tool.input, decision.input);
  if ('thrown' in parsed) {
    return {
      ok: false,
      problem: `the input schema of tool "${decision.tool}" threw on the recorded decision (${failureText(parsed.thrown)}): redeploy an agent whose "${decision.tool}" takes this input, ${retry}`,
    };
  }
  if (!parsed.ok && parsed.checksOnly) {
    // Not drift: the call fit when it was made, and a check that reads outside state (a table that must
    // exist) finds it as the call's own effect left it before a crash. Said as drift, the advice was to
    // redeploy the same schema, whose retry then failed the same way.
    return {
      ok: false,
      problem: `the recorded decision for tool "${decision.tool}" fails a check of its input schema (${parsed.issues}), its fields still fitting: a check that reads outside state (a refine that looks a table up) is made again at every try, and a try after a crash finds that state as the call's own effect may have left it; redeploy an agent whose "${decision.tool}" makes that check in its run (a ToolError answers the model), ${retry}`,
    };
  }
  if (!parsed.ok) {
    return {
      ok: false,
      problem: `the recorded decision for tool "${decision.tool}" no longer fits its input schema (${parsed.issues}): redeploy an agent whose "${decision.tool}" takes this input, ${retry}`,
    };
  }
  return { ok: true, tool, input: parsed.data };
}
