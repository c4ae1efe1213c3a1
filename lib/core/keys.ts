/** The idempotency key of a step: stable across retries and workers, unique per run and step. */
export function idempotencyKey(runId: string, step: number): string {
  return `${runId}/step-${step}`;
}

/**
 * The idempotency key of the approval email to one approver of a wait, and the email's id: sent once per
 * wait and approver, whichever delivery gets there first.
 */
export function approvalEmailKey(runId: string, waitId: string, approver: string): string {
  return `${runId}/wait-${waitId}/${approver}`;
}

/**
 * What every idempotency key of a run begins with: its steps' (idempotencyKey) and its approval emails'
 * (approvalEmailKey). A run id holds no slash (RUN_ID_PATTERN), so no other run's key
 * begins with it: deleting a run deletes the keys under it and no others.
 */
export function idempotencyKeyPrefix(runId: string): string {
  return `${runId}/`;
}

/** The run whose key this is (idempotencyKeyPrefix), or undefined for a key under no run's prefix. */
export function runOfKey(key: string): string | undefined {
  const slash = key.indexOf('/');
  return slash > 0 ? key.slice(0, slash) : undefined;
}
