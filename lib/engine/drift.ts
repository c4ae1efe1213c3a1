import { needsApproval, worksRunsOf, type AgentDefinition } from '../agent.ts';
import { approvedCall } from '../core/approval-gate.ts';
import type { StoredCheckpoint } from '../core/codec.ts';
import { unheldBlocksPriced } from '../llm/cost.ts';
import { checkDecision } from '../core/drift.ts';
import { NewerFormatError, UnreadableCheckpointError } from '../core/errors.ts';
import type { RunState, RunStatus } from '../core/state.ts';
import type { CheckpointStore, RunSummary } from '../ports.ts';
import { loadAsResumed } from './operate/load.ts';

/** A run the new code or agent cannot resume, and why. */
export interface BlockedRun {
  runId: string;
  status: RunStatus;
  step: number;
  version: number;
  problem: string;
  /** For a record this code cannot read: the format (or fields) a worker needs. */
  needs?: string;
}

export interface DriftReport {
  agent: string;
  /** Running and waiting runs of this agent whose latest checkpoint was read. */
  checked: number;
  /** Running and waiting runs of other agents, not this agent's to resume. */
  otherAgents: number;
  /** Those runs by agent, most first: a rename without formerNames shows here, its runs left to no worker. */
  others: { agent: string; runs: number }[];
  blocked: BlockedRun[];
  /** True when there were more runs than the check could list: it is then not a complete answer. */
  truncated: boolean;
}

/** More live runs than this and the check says it is incomplete rather than pass. */
export const DRIFT_LIST_LIMIT = 100_000;

/**
 * Reads the latest checkpoint of every running and waiting run of `agent` and says which ones this code
 * and this agent cannot resume: a record in a format it cannot read (newer, unknown fields, unreadable),
 * or a recorded decision for a tool the agent no longer has or whose input no longer fits the tool's
 * schema. Writes nothing. A waiting run's decision became its wait: the answer completes that step under
 * any agent. But a call of a tool with `approval` is a decision still to run: approved, it runs at the next
 * step as it was made, not asked of the model again, so such a call, waiting or approved, is checked too.
 */
/**
 * The call of a tool with `approval` a run will make without asking the model: the one its wait asks a
 * person about, or the one approved at its last step. Under the new agent's gates: a tool it no longer
 * gates (or has) is asked of the model again, not run.
 */
function gatedCall(state: RunState, agent: AgentDefinition): { step: number; tool: string; input: unknown; what: string } | undefined {
  const gated = (tool: string) => needsApproval(agent, tool);
  const { wait } = state;
  if (state.status === 'waiting') {
    return wait?.kind === 'approval' && gated(wait.tool)
      ? { step: wait.step + 1, tool: wait.tool, input: wait.input, what: 'the call waiting for approval (approved, it runs as it was made, the model not asked)' }
      : undefined;
  }
  const approved = approvedCall(state, gated);
  return approved && { step: state.step + 1, ...approved, what: 'the approved call (it runs as it was made, the model not asked)' };
}

export async function findDrift(store: CheckpointStore, agent: AgentDefinition, options: { limit?: number } = {}): Promise<DriftReport> {
  const limit = options.limit ?? DRIFT_LIST_LIMIT;
  const live: RunSummary[] = [];
  let truncated = false;
  for (const status of ['running', 'waiting'] as const) {
    const runs = await store.list({ status, limit });
    if (runs.length >= limit) truncated = true;
    live.push(...runs);
  }
  const report: DriftReport = { agent: agent.name, checked: 0, otherAgents: 0, others: [], blocked: [], truncated };
  const others = new Map<string, number>();
  for (const summary of live.sort((a, b) => a.runId.localeCompare(b.runId))) {
    if (!worksRunsOf(agent, summary.agent)) {
      report.otherAgents++;
      others.set(summary.agent, (others.get(summary.agent) ?? 0) + 1);
      continue;
    }
    // What a worker's resume reads (lib/engine/advance.ts): a long run's block summaries and the records
    // after them, not every record, which made the check of a few runs of 20,000 steps take seconds.
    const read = await store.load(summary.runId, { recent: true });
    // Ended or gone since the listing: nothing to resume.
    if (!read || (read.status !== 'running' && read.status !== 'waiting')) continue;
    let stored: StoredCheckpoint = read;
    report.checked++;
    // Status, step and version all from the last read: the listing's step is of an earlier version when the
    // run moved since (a worker committed a step), and the row then named a step and version that never
    // went together. A record this code cannot decode still has its step records counted.
    const blocked = (problem: string, needs?: string) => report.blocked.push({
      runId: stored.runId, status: stored.status, step: (stored.stepsAfter ?? 0) + stored.steps.length, version: stored.version, problem, ...(needs ? { needs } : {}),
    });
    let state;
    try {
      // Every record only where a resume reads them: a dollar budget with a block summarised without its cost.
      ({ stored, state } = (await loadAsResumed(store, summary.runId, (s) => s.budget?.usd !== undefined && !unheldBlocksPriced(s), read))!);
    } catch (error) {
      if (error instanceof NewerFormatError) { blocked(error.message, error.needs); continue; }
      if (error instanceof UnreadableCheckpointError) { blocked(error.message); continue; }
      throw error;
    }
    if (state.status === 'running' && state.pending) {
      const resumable = await checkDecision(state.pending, agent, state.runId);
      if (!resumable.ok) blocked(`step ${state.pending.step}: ${resumable.problem}`);
      continue;
    }
    const call = gatedCall(state, agent);
    if (call) {
      const resumable = await checkDecision({ step: call.step, tool: call.tool, input: call.input, at: state.updatedAt }, agent, state.runId);
      if (!resumable.ok) blocked(`step ${call.step}: ${call.what}: ${resumable.problem}`);
    }
  }
  report.others = [...others].map(([name, runs]) => ({ agent: name, runs })).sort((a, b) => b.runs - a.runs || a.agent.localeCompare(b.agent));
  return report;
}
