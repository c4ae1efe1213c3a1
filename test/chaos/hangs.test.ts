import { describe, expect, it } from 'vitest';
import { HUNG_TOOL, HUNG_TOOL_TIMEOUT_MS, hangPlan } from '../../bench/chaos/hangs.ts';

describe('the chaos schedules\' hang plan', () => {
  it('a schedule that hangs nothing keeps the default tool time and never hangs', () => {
    const plan = hangPlan(7, 0);
    expect(plan).toMatchObject({ hangs: false, toolTime: {} });
    expect(Array.from({ length: 200 }, () => plan.hangHere()).some(Boolean)).toBe(false);
  });

  it('one that hangs holds its tools to 1 s and hangs exactly once, at a point its seed decides', () => {
    const plan = hangPlan(7, 1);
    expect(plan).toMatchObject({ hangs: true, toolTime: { timeoutMs: HUNG_TOOL_TIMEOUT_MS } });
    const asks = Array.from({ length: 500 }, () => plan.hangHere());
    expect(asks.filter(Boolean)).toHaveLength(1);
    const again = hangPlan(7, 1);
    expect(Array.from({ length: 500 }, () => again.hangHere())).toEqual(asks);
  });

  it('the hung tool\'s reason is the engine\'s for a 1 s limit, and only that', () => {
    expect(HUNG_TOOL.test('step 3 failed 3 times; last error: tool write_row did not finish within 1 s (its timeoutMs)')).toBe(true);
    expect(HUNG_TOOL.test('step 3 failed 3 times; last error: tool write_row did not finish within 3 s (its timeoutMs)')).toBe(false);
    expect(HUNG_TOOL.test('step 3: tool write_row did not finish within 1 s (its timeoutMs)')).toBe(false);
  });
});
