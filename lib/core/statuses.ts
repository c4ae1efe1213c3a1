/**
 * A run's statuses, apart from the schemas in state.ts: what only needs a status (listing runs, the
 * stores' status columns) loads no zod.
 */
export const RUN_STATUSES = ['running', 'waiting', 'completed', 'failed', 'capped', 'over-budget', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const TERMINAL_STATUSES: readonly RunStatus[] = ['completed', 'failed', 'capped', 'over-budget', 'cancelled'];

export function isTerminal(status: RunStatus): boolean {
  return TERMINAL_STATUSES.includes(status);
}
