import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../../lib/agent.ts';
import { requestApproval } from '../../../lib/waits/tools.ts';

/**
 * The agent of the drift tests, as deployed today and as a new version might change it: its side-effecting
 * tool renamed, or given an input the recorded decisions do not have.
 */
export function driftAgent(change: 'none' | 'renamed' | 'changed-input' = 'none'): AgentDefinition {
  const input = change === 'changed-input'
    ? z.object({ row: z.number().int(), table: z.string() })
    : z.object({ row: z.number().int() });
  return defineAgent({
    name: 'drift-agent',
    tools: [
      tool({
        name: change === 'renamed' ? 'insert_row' : 'write_row', description: 'Write one row.', input, sideEffect: true,
        run: (value) => `wrote row ${value.row}`,
      }),
      tool({ name: 'count_rows', description: 'Count rows.', input: z.object({}), sideEffect: false, run: () => 'rows: 3' }),
      requestApproval({ approvers: ['ops@example.com'] }),
    ],
  });
}
