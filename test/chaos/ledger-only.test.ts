import { describe, expect, it } from 'vitest';
import { RECORD_WITHIN_MS, applicationsUnexplained } from '../../bench/chaos/ledger-only.ts';

describe('the process schedules\' ledger-only effects: which second applications a fault explains', () => {
  const twice = [{ key: 'k/step-1', pid: 10, at: 1_000 }, { key: 'k/step-1', pid: 11, at: 3_000 }];

  it('counts a second application no fault explains as the ledger\'s', () => {
    expect(applicationsUnexplained(twice, [])).toEqual({ times: new Map([['k/step-1', 2]]), explained: 0 });
    // A fault on another worker, or on the first holder before it acted or long after, explains nothing.
    const unrelated = [{ pid: 11, at: 1_500, ms: 0 }, { pid: 10, at: 500, ms: 0 }, { pid: 10, at: 1_000 + RECORD_WITHIN_MS + 1, ms: 0 }];
    expect(applicationsUnexplained(twice, unrelated).times.get('k/step-1')).toBe(2);
  });

  it('leaves out one that follows a kill, a freeze or a brownout of the first holder before it could record it', () => {
    for (const fault of [{ pid: 10, at: 1_010, ms: 0 }, { pid: 10, at: 1_200, ms: 1_800 }, { at: 900, ms: 400 }]) {
      expect(applicationsUnexplained(twice, [fault])).toEqual({ times: new Map([['k/step-1', 1]]), explained: 1 });
    }
  });

  it('judges each application against the one before it, whatever order they come in', () => {
    const thrice = [{ key: 'k', pid: 12, at: 9_000 }, { key: 'k', pid: 10, at: 1_000 }, { key: 'k', pid: 11, at: 3_000 }];
    // 10 was killed after acting (11's explained); 11 was not (12's is the ledger's).
    expect(applicationsUnexplained(thrice, [{ pid: 10, at: 1_100, ms: 0 }])).toEqual({ times: new Map([['k', 2]]), explained: 1 });
  });
});
