import type { EventBridgeEvent } from 'aws-lambda';
import { agentNames, type AgentDefinition } from '../agent.ts';
import { InvalidInputError, errorMessage } from '../core/errors.ts';
import { startFromEvent, triggerMatches } from '../engine/start-from-event.ts';
import { withFields, type Logger } from '../log.ts';
import type { IncomingEvent } from '../core/waits.ts';
import type { BlobStore, CheckpointStore, Clock, EventBuffer, RunQueue } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { checkEventPayload, emitEvent, readWaitEvent, type waitEventOf } from '../waits/events.ts';

export interface EventHandlerOptions {
  runtime: { store: CheckpointStore; blobs: BlobStore; queue: RunQueue };
  events: EventBuffer;
  agent: AgentDefinition;
  log: Logger;
  codeVersion: string;
  clock?: Clock;
}

export interface EventHandlerResult {
  started: { runId: string; created: boolean }[];
  resumed: string[];
}

/**
 * The EventBridge-triggered Lambda: an event resumes the runs waiting for it (kept first, so a wait that
 * begins a moment later still finds it) and starts a run for each of the agent's matching `startOn`
 * triggers, with a run id derived from the event id. Both are idempotent, so EventBridge's retries and
 * at-least-once delivery change nothing the first delivery did.
 */
export function createEventHandler(options: EventHandlerOptions): (event: EventBridgeEvent<string, unknown>, context: { awsRequestId: string }) => Promise<EventHandlerResult> {
  return async (event, context) => {
    // Not an EventBridge event (an SQS or SNS envelope, a test payload): without its id, a run trigger's
    // run id would be one for every such event. Thrown, so the invocation ends in the dead-letter queue
    // with the event kept, not answered as if it matched nothing.
    if (!isEventBridgeEvent(event)) {
      throw new InvalidInputError(`not an EventBridge event (it needs string id, source and detail-type): ${String(JSON.stringify(event)).slice(0, 200)}`);
    }
    const deps = {
      ...options.runtime, agent: options.agent, clock: options.clock ?? systemClock, workerId: context.awsRequestId,
      codeVersion: options.codeVersion, log: withFields(options.log, { workerId: context.awsRequestId, eventId: event.id }),
    };
    const incoming = incomingEvent(event);
    const started = await startFromEvent(deps, options.agent.startOn ?? [], incoming);
    // Like a run trigger's goal, the agent's eventKey runs on any event: when it throws, the event resumes
    // no wait and says why. Thrown on, EventBridge would retry a failure that repeats for a day.
    let forWaits: ReturnType<typeof waitEventOf>;
    try {
      const read = readWaitEvent(options.agent, incoming);
      if (!('unmatched' in read)) forWaits = read;
      // Routed here by the agent's rules, yet it starts no run and can answer no wait: said, or an
      // operator sees nothing of why a run waiting for it never resumes. Not when a trigger is for it and
      // its goal chose to start none (a bucket's other objects): a warning on each, naming the event's type
      // as no wait's, sent the operator after a fault that is not there.
      else if (!started.length && !(options.agent.startOn ?? []).some((trigger) => triggerMatches(trigger, incoming))) deps.log.warn({ event: 'event-unmatched', eventId: event.id, source: event.source, detailType: event['detail-type'], reason: read.unmatched }, `the event starts no run and resumes no wait: ${read.unmatched}`);
    } catch (error) {
      deps.log.error({ event: 'event-key-error', eventId: event.id, source: event.source, detailType: event['detail-type'], error: errorMessage(error) }, "the agent's eventKey failed on an event; it resumes no wait");
    }
    if (forWaits) {
      // A payload no wait may take (nested past 64 levels) is refused on every delivery: thrown, EventBridge
      // retried it for a day. Logged, as an eventKey that throws is; any trigger it matched has started.
      try {
        checkEventPayload(forWaits.payload);
      } catch (error) {
        if (!(error instanceof InvalidInputError)) throw error;
        deps.log.error({ event: 'event-invalid', eventId: event.id, source: event.source, detailType: event['detail-type'], error: error.message }, 'the event resumes no wait');
        forWaits = undefined;
      }
    }
    let resumed: string[] = [];
    if (forWaits) {
      const result = await emitEvent(
        { ...deps, events: options.events, waitingFor: (type, key) => options.runtime.store.waitingFor(type, key), agents: agentNames(options.agent) },
        { ...forWaits, id: event.id },
      );
      resumed = result.resumed.filter((r) => r.outcome === 'resumed').map((r) => r.runId);
    }
    return { started: started.map((s) => ({ runId: s.runId, created: s.created })), resumed };
  };
}

function isEventBridgeEvent(event: unknown): event is EventBridgeEvent<string, unknown> {
  if (!event || typeof event !== 'object') return false;
  const { id, source, 'detail-type': detailType } = event as Record<string, unknown>;
  return typeof id === 'string' && id !== '' && typeof source === 'string' && typeof detailType === 'string';
}

/** The event as a trigger's goal and the agent's eventKey see it: EventBridge's fields by their own names, those it has. */
function incomingEvent(event: EventBridgeEvent<string, unknown>): IncomingEvent {
  const incoming: IncomingEvent = { id: event.id, source: event.source, detailType: event['detail-type'], detail: event.detail };
  if (typeof event.time === 'string') incoming.time = event.time;
  if (typeof event.account === 'string') incoming.account = event.account;
  if (typeof event.region === 'string') incoming.region = event.region;
  if (Array.isArray(event.resources) && event.resources.every((r) => typeof r === 'string')) incoming.resources = [...event.resources];
  const replay = (event as { 'replay-name'?: unknown })['replay-name'];
  if (typeof replay === 'string') incoming.replayName = replay;
  return incoming;
}
