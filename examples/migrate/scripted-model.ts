import { promptText } from '../../lib/core/prompt.ts';
import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';

export const BATCH_SIZE = 100;

interface SeenStep { step: number; tool: string; ok: boolean; result: Record<string, unknown> | undefined }

/**
 * The offline stand-in for Claude in the demo: it reads only the Step prompt it is sent (the completed
 * steps and their results), exactly what a real model would see after a restart, and picks the next tool.
 */
export class ScriptedMigrationModel implements Model {
  readonly name = 'scripted-migration';

  async decide(request: ModelRequest): Promise<ModelReply> {
    const steps = completedSteps(promptText(request.prompt));
    const inspected = steps.findLast((s) => s.tool === 'inspect_tables' && s.ok)?.result;
    if (!inspected) return call('inspect_tables', {});
    const maxSourceId = Number(inspected.maxSourceId ?? 0);
    const lastId = Number(steps.findLast((s) => s.tool === 'copy_batch' && s.ok)?.result?.lastId ?? 0);
    if (lastId < maxSourceId) return call('copy_batch', { afterId: lastId, limit: BATCH_SIZE });
    const verified = steps.findLast((s) => s.tool === 'verify' && s.ok)?.result;
    if (!verified) return call('verify', {});
    const copies = steps.filter((s) => s.tool === 'copy_batch').length;
    if (!verified.exactlyOnce) return { kind: 'done', summary: `Copied rows in ${copies} batches, but verification failed: ${JSON.stringify(verified)}.` };
    const copied = `Copied ${verified.targetRows} of ${verified.sourceRows} rows from source to target in ${copies} batches of up to ${BATCH_SIZE}; verification found no duplicates, no missing rows and no mismatched values.`;
    // Dropping the source is irreversible: drop_source waits for a person's approval (its `approval`), whose
    // answer is that step's result; approved, the engine runs the call at the next step.
    const drops = steps.filter((s) => s.tool === 'drop_source');
    const approval = drops.findLast((s) => s.result?.approval !== undefined || s.result?.timedOut === true);
    if (!approval) return call('drop_source', { confirm: 'DROP TABLE source' });
    if (approval.result?.approval !== 'approved') {
      const why = approval.result?.timedOut ? 'nobody approved in time' : `rejected by ${String(approval.result?.by)}${approval.result?.comment ? `: ${String(approval.result.comment)}` : ''}`;
      return { kind: 'done', summary: `${copied} The source table was kept: dropping it was ${why}.` };
    }
    if (!drops.some((s) => s.ok && s.result?.dropped !== undefined)) return call('drop_source', { confirm: 'DROP TABLE source' });
    return { kind: 'done', summary: `${copied} With approval from ${String(approval.result?.by)}, the source table was dropped.` };
  }
}

function call(tool: string, input: Record<string, unknown>): ModelReply {
  return { kind: 'tool', tool, input };
}

/** Parses the completed-steps lines: `3. copy_batch {"afterId":100,"limit":100} -> ok: {...}`. */
export function completedSteps(prompt: string): SeenStep[] {
  const start = prompt.indexOf('<completed_steps>\n') + '<completed_steps>\n'.length;
  const section = prompt.slice(start, prompt.indexOf('\n</completed_steps>'));
  const steps: SeenStep[] = [];
  for (const line of section.split('\n')) {
    const m = /^(\d+)\. (\S+) .* -> (ok|error): (.*)$/.exec(line);
    if (!m) continue;
    let result: Record<string, unknown> | undefined;
    try {
      result = JSON.parse(m[4]!.replace(/ \[full output .*\]$/, '')) as Record<string, unknown>;
    } catch {
      result = undefined;
    }
    steps.push({ step: Number(m[1]), tool: m[2]!, ok: m[3] === 'ok', result });
  }
  return steps;
}
