import { findDrift } from '../../engine/drift.ts';
import { openBackend, requireAgent, type CliOptions } from '../context.ts';
import { table } from '../format.ts';

/** `drift` exits with this when some run cannot be resumed: a deploy gate tells it from a crash (1) or bad input (2). */
export const DRIFT_EXIT_CODE = 3;

/**
 * `drift --agent new-agent.ts`: before deploying, which running and waiting runs this code and this agent
 * could not resume. Reads only; exit 3 if any.
 */
export async function driftCommand(options: CliOptions & { json?: boolean }, out: (line: string) => void): Promise<number> {
  const agent = await requireAgent(options);
  const runtime = await openBackend(options, ['table'], { readOnly: true });
  try {
    const report = await findDrift(runtime.store, agent);
    if (options.json) {
      out(JSON.stringify(report, null, 2));
    } else {
      const runs = `${report.checked} running or waiting run${report.checked === 1 ? '' : 's'} of agent ${report.agent}`;
      out(report.blocked.length
        ? `checked ${runs}: ${report.blocked.length} cannot be resumed by this code and agent`
        : `checked ${runs}: this code and agent can resume every one`);
      if (report.blocked.length) {
        out(table(['RUN', 'STATUS', 'STEP', 'VERSION', 'PROBLEM'], report.blocked.map((b) => [b.runId, b.status, b.step, b.version, b.problem])));
      }
      if (report.otherAgents) {
        // Other agents' runs may be theirs to resume; or this agent is one of them renamed, and a deploy
        // without formerNames leaves them to no worker. drift cannot tell the two apart: it says both.
        const byAgent = report.others.map((o) => `${o.agent}: ${o.runs}`).join(', ');
        const former = report.others.length === 1 ? JSON.stringify([report.others[0]!.agent]) : '[...]';
        out(`${report.otherAgents} run${report.otherAgents === 1 ? '' : 's'} of other agents not checked (${byAgent}); if agent ${report.agent} was renamed from one of them, add formerNames: ${former} to its defineAgent, or no worker of it will resume those runs`);
      }
      if (report.truncated) out('more runs than the check lists: the answer is incomplete');
    }
    return report.blocked.length || report.truncated ? DRIFT_EXIT_CODE : 0;
  } finally {
    runtime.close();
  }
}
