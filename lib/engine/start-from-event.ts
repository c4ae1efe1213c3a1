import { createHash } from 'node:crypto';
import { errorMessage } from '../core/errors.ts';
import type { EventTrigger, IncomingEvent } from '../core/waits.ts';
import type { EngineDeps } from './deps.ts';
import { startRun, validateGoal, type StartResult } from './start.ts';

/**
 * The run id for an event and trigger of an agent: derived from the event id, so EventBridge's
 * at-least-once delivery (the same event id twice) finds the run already started instead of starting a
 * second one; and from the agent's name, so two agents sharing a table that both start on the event each
 * get their run (one id for both would be the first's, and the second's start refused).
 */
export function runIdForEvent(agent: string, event: Pick<IncomingEvent, 'id' | 'source'>, triggerIndex: number): string {
  return `evt-${createHash('sha256').update(`${agent}\n${event.source}\n${event.id}\n${triggerIndex}`).digest('hex').slice(0, 40)}`;
}

/** Whether a trigger is for this event (its source and detail type): its goal then says whether a run starts. */
export function triggerMatches(trigger: Pick<EventTrigger, 'source' | 'detailType'>, event: Pick<IncomingEvent, 'source' | 'detailType'>): boolean {
  return (trigger.source === undefined || trigger.source === event.source) && (trigger.detailType === undefined || trigger.detailType === event.detailType);
}

export async function startFromEvent(
  deps: Pick<EngineDeps, 'store' | 'queue' | 'agent' | 'clock' | 'workerId' | 'codeVersion' | 'log'>,
  triggers: readonly EventTrigger[],
  event: IncomingEvent,
): Promise<StartResult[]> {
  const started: StartResult[] = [];
  for (const [index, trigger] of triggers.entries()) {
    if (!triggerMatches(trigger, event)) continue;
    let goal: string | undefined;
    try {
      const made = trigger.goal(event);
      // A goal no run may have (empty, over the limit, not a string) fails the same way on every delivery:
      // said here, like a goal that throws, not thrown to a retry that ends in the dead-letter queue.
      goal = made === undefined ? undefined : validateGoal(made);
    } catch (error) {
      deps.log.error({ event: 'trigger-error', eventId: event.id, source: event.source, trigger: index, error: errorMessage(error) }, 'a run trigger failed on an event; no run started for it');
      continue;
    }
    if (goal === undefined) {
      // The agent's own choice (an S3 object it does not handle): said at debug, as nothing went wrong.
      deps.log.debug({ event: 'trigger-declined', eventId: event.id, source: event.source, trigger: index }, 'a run trigger started no run for this event: its goal returned undefined');
      continue;
    }
    const result = await startRun(deps, { goal, runId: runIdForEvent(deps.agent.name, event, index) });
    deps.log.info({ event: 'run-triggered', eventId: event.id, source: event.source, detailType: event.detailType, runId: result.runId, created: result.created }, result.created ? 'event started a run' : 'event already started this run');
    started.push(result);
  }
  return started;
}
