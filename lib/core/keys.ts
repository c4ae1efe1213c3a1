/** The idempotency key of a step: stable across retries and workers, unique per run and step. */
export function idempotencyKey(runId: string, step: number): string {
  return `${runId}/step-${step}`;
}
