import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { signApproval, verifyApproval } from '../../lib/waits/approval-token.ts';
import { fuzzRuns } from '../support/fuzz-runs.ts';

const key = Buffer.alloc(32, 7);
const claim = fc.record({
  runId: fc.string({ minLength: 1, maxLength: 60 }), waitId: fc.string({ minLength: 1, maxLength: 60 }),
  approver: fc.string({ minLength: 3, maxLength: 60 }), expiresAt: fc.integer({ min: 1, max: 2 ** 45 }),
});

describe('fuzzing approval tokens', () => {
  it('any string is a clear refusal or a claim, never a throw', () => {
    fc.assert(fc.property(fc.oneof(fc.string({ maxLength: 1000 }), fc.string({ unit: 'binary', maxLength: 200 })), (token) => {
      const checked = verifyApproval(token, key, 0);
      if (!checked.ok) expect(checked.message).toEqual(expect.any(String));
    }), fuzzRuns(300));
  });

  it('a token verifies only exactly as issued: any change, even one base64 decoding would ignore, is refused', () => {
    fc.assert(fc.property(claim, fc.nat(), fc.string({ minLength: 1, maxLength: 3 }), fc.constantFrom('replace', 'insert', 'append'), (c, at, s, how) => {
      const token = signApproval(c, key);
      expect(verifyApproval(token, key, 0)).toEqual({ ok: true, claim: c });
      const i = at % token.length;
      const changed = how === 'replace' ? token.slice(0, i) + s + token.slice(i + 1) : how === 'insert' ? token.slice(0, i) + s + token.slice(i) : token + s;
      fc.pre(changed !== token);
      expect(verifyApproval(changed, key, 0).ok, changed).toBe(false);
    }), fuzzRuns(1000));
  });

  it('the last character of a signature carries unused bits: a variant that decodes to the same bytes is refused', () => {
    const token = signApproval({ runId: 'run', waitId: 'w', approver: 'ops@example.com', expiresAt: 10 }, key);
    const last = token.at(-1)!;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const sameBytes = [...alphabet].filter((ch) => ch !== last && Buffer.from(token.split('.')[2]!.slice(0, -1) + ch, 'base64url').equals(Buffer.from(token.split('.')[2]!, 'base64url')));
    expect(sameBytes.length).toBeGreaterThan(0);
    for (const ch of sameBytes) expect(verifyApproval(token.slice(0, -1) + ch, key, 0).ok).toBe(false);
  });
});
