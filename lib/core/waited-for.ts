import type { WaitRecord } from './state.ts';

/**
 * What a wait waits for, in words: the approvers, the event, or a time. Apart from waits.ts, so a command
 * that only lists runs (`status`) loads no zod.
 */
export function waitedFor(wait: Pick<WaitRecord, 'kind' | 'approvers' | 'event'>): string {
  return wait.kind === 'approval' ? `approval by ${(wait.approvers ?? []).join(', ')}`
    : wait.kind === 'event' ? `event ${wait.event?.type} ${wait.event?.key}` : 'its time';
}
