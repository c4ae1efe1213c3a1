import { describe, expect, it } from 'vitest';
import { DEFAULT_LEASE_MS, LEASE_MARGIN_MS, MAX_LEASE_MS, leaseMsOf, renewEveryMs, retryAfterMs } from '../../lib/core/lease.ts';

describe('leases on idempotency keys', () => {
  it('defaults to 60 s and renews three times per lease', () => {
    expect(leaseMsOf()).toBe(DEFAULT_LEASE_MS);
    expect(leaseMsOf({ leaseMs: 9_000 })).toBe(9_000);
    expect(renewEveryMs(60_000)).toBe(20_000);
  });

  it('waits until the lease ends plus a margin, and never longer than the longest lease', () => {
    const now = 1_000_000;
    expect(retryAfterMs(now + 30_000, now)).toBe(30_000 + LEASE_MARGIN_MS);
    expect(retryAfterMs(now - 5_000, now)).toBe(LEASE_MARGIN_MS);
    // A holder whose clock runs hours ahead does not park the step for hours.
    expect(retryAfterMs(now + 5 * 3_600_000, now)).toBe(MAX_LEASE_MS + LEASE_MARGIN_MS);
    // An unreadable lease end waits one default lease.
    expect(retryAfterMs(Number.NaN, now)).toBe(DEFAULT_LEASE_MS + LEASE_MARGIN_MS);
  });
});
