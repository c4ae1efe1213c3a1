import { apiError, dropConnection, dropMidReply, endTurn, slow, toolUses, type Reply } from '../../test/support/messages-server.ts';
import { SLOW_REPLY_MS } from './model-server.ts';
import { rng } from './random.ts';

export const PERMANENT_FAULT = 'injected permanent fault';

/**
 * A run failed by the model's unavailability: after the SDK's retries, 429, 5xx, 529, no connection or no
 * answer. No schedule injects an outage of the 30 tries that takes (MAX_MODEL_UNAVAILABLE_FAILURES), so a
 * run that ends so is a broken promise, not an injected fault, whatever the words "injected" in its reason.
 */
export const MODEL_OUTAGE_FAILURE = /last error: (?:the Anthropic API failed: (?:429|5\d\d)|cannot reach the Anthropic API|the Anthropic API did not answer in time)/;
const MODEL_FAULTS = ['429 burst', '529', '500', 'dropped', 'dropped mid-reply', 'slow', 'outage'] as const;
/**
 * An outage is 529s for this many of a run's requests: with the SDK's 2 retries, 3 to 7 failed tries of its
 * step, past the 3 that fail a run for other transient errors and short of the 30 a model outage gets.
 */
const OUTAGE_REQUESTS = [9, 21] as const;

/** What a schedule's model fault script needs of one request: whose it is, and the reply it would give. */
export interface ModelRequestFacts {
  runId: string;
  /** The step this request decides. */
  next: number;
  /** This request meets the run's injected permanent fault. */
  permanent: boolean;
  decision: () => Reply;
}

/**
 * The model faults both schedule kinds inject, per request: a 429 burst goes on for the next requests of
 * the same run, and an outage (529s) for the next 8-20 of them; otherwise 6% (x intensity) a transport or
 * HTTP fault, 2% an unusable reply. Drawn from a stream of the schedule's seed of their own: should a request
 * the seed did not plan reach the server, only the model faults after it shift, not the crashes and
 * deliveries. An outage counts once, however many requests it refuses.
 */
export function modelFaultScript(seed: number, count: (kind: string) => void, intensity = 1): (facts: ModelRequestFacts) => Reply {
  const m = rng(seed ^ 0x2545f491);
  const bursts = new Map<string, number>();
  const outages = new Map<string, number>();
  return ({ runId, next, permanent, decision }) => {
    const burst = bursts.get(runId) ?? 0;
    if (burst > 0) {
      bursts.set(runId, burst - 1);
      count('429 burst');
      return apiError(429, 'injected: rate limited', { 'retry-after': '1', 'retry-after-ms': '2' });
    }
    const outage = outages.get(runId) ?? 0;
    if (outage > 0) {
      outages.set(runId, outage - 1);
      return apiError(529, 'injected: Overloaded (an outage)', { 'retry-after-ms': '1' });
    }
    if (permanent) return apiError(400, PERMANENT_FAULT);
    if (m.chance(0.06 * intensity)) {
      const kind = m.pick(MODEL_FAULTS);
      count(kind);
      switch (kind) {
        case '429 burst': bursts.set(runId, m.int(0, 2)); return apiError(429, 'injected: rate limited', { 'retry-after': '1', 'retry-after-ms': '2' });
        case '529': return apiError(529, 'injected: Overloaded', { 'retry-after-ms': '1' });
        case '500': return apiError(500, 'injected: Internal server error', { 'retry-after-ms': '1' });
        case 'dropped': return dropConnection();
        case 'dropped mid-reply': return dropMidReply(decision());
        case 'slow': return slow(SLOW_REPLY_MS, decision());
        case 'outage':
          outages.set(runId, m.int(OUTAGE_REQUESTS[0], OUTAGE_REQUESTS[1]) - 1);
          return apiError(529, 'injected: Overloaded (an outage)', { 'retry-after-ms': '1' });
      }
    }
    if (m.chance(0.02 * intensity)) {
      count('invalid reply');
      return m.chance(0.5)
        ? toolUses([{ name: 'write_row', input: { n: next } }, { name: 'notify', input: { n: next } }])
        : endTurn('injected: neither a tool call nor DONE');
    }
    return decision();
  };
}
