import { describe, expect, it } from 'vitest';
import { MODEL_OUTAGE_FAILURE, modelFaultScript } from '../../bench/chaos/model-faults.ts';
import { endTurn, type Reply } from '../support/messages-server.ts';

/** The chaos schedules' model faults: an outage outlasts the 3 tries other transient errors get. */
describe('chaos model faults', () => {
  it('an outage is 9-21 529s in a row for its run, and other runs are answered meanwhile', () => {
    const outages: number[] = [];
    for (let seed = 1; outages.length < 20 && seed < 5_000; seed++) {
      const kinds: string[] = [];
      const script = modelFaultScript(seed, (kind) => kinds.push(kind), 5);
      const reply = (runId: string): Reply => script({ runId, next: 1, permanent: false, decision: () => endTurn('DONE ok') });
      for (let i = 0; i < 40 && !kinds.includes('outage'); i++) reply('r');
      if (!kinds.includes('outage')) continue;
      // The run's next requests are 529s until the outage ends; another run meanwhile gets its own draw.
      let length = 1;
      while (length < 100) {
        expect(reply('other')).toBeDefined();
        const next = reply('r');
        if (!(next.type === 'error' && next.status === 529 && next.message.includes('an outage'))) break;
        length++;
      }
      outages.push(length);
    }
    expect(outages).toHaveLength(20);
    expect(Math.min(...outages)).toBeGreaterThanOrEqual(9);
    expect(Math.max(...outages)).toBeLessThanOrEqual(21);
  });

  it('a run failed by the model being unavailable counts as a broken promise, not as an injected fault', () => {
    for (const reason of [
      'step 2 failed 3 times; last error: the Anthropic API failed: 529 overloaded_error: injected: Overloaded (an outage) (request req_1), after retries',
      'step 4 failed 3 times; last error: the Anthropic API failed: 429 rate_limit_error: injected: rate limited, after retries',
      'step 1 failed 3 times; last error: cannot reach the Anthropic API, after retries: socket hang up',
      'step 1 failed 3 times; last error: the Anthropic API did not answer in time, after retries',
    ]) expect(MODEL_OUTAGE_FAILURE.test(reason), reason).toBe(true);
    for (const reason of [
      'step 3: the Anthropic API refused the request: 400 invalid_request_error: injected permanent fault (request req_2)',
      'step 2 failed 3 times; last error: model reply unusable: 2 tool calls in one reply',
      'step 5 was started 11 times without finishing',
    ]) expect(MODEL_OUTAGE_FAILURE.test(reason), reason).toBe(false);
  });
});
