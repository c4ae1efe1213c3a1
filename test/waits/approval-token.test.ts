import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { waitRecordFor, type WaitRequest } from '../../lib/core/waits.ts';
import { signApproval, verifyApproval } from '../../lib/waits/approval-token.ts';
import { requestApproval } from '../../lib/waits/tools.ts';

const key = randomBytes(32);
const claim = { runId: 'run-1', waitId: 'wait-abcdef01', approver: 'ops@example.com', expiresAt: 2_000 };

describe('approval tokens', () => {
  it('verify what was signed, until it expires', () => {
    const token = signApproval(claim, key);
    expect(token).toMatch(/^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    expect(verifyApproval(token, key, 1_999)).toEqual({ ok: true, claim });
    expect(verifyApproval(token, key, 2_000)).toMatchObject({ ok: false, reason: 'expired', claim });
  });

  it('refuse a token signed with another key, or changed in any part', () => {
    const token = signApproval(claim, key);
    expect(verifyApproval(token, randomBytes(32), 0)).toMatchObject({ ok: false, reason: 'bad-signature' });
    const [v, payload, sig] = token.split('.') as [string, string, string];
    const forged = Buffer.from(JSON.stringify({ r: 'run-2', w: claim.waitId, a: claim.approver, e: claim.expiresAt })).toString('base64url');
    expect(verifyApproval(`${v}.${forged}.${sig}`, key, 0)).toMatchObject({ ok: false, reason: 'bad-signature' });
    const flipped = sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A');
    expect(verifyApproval(`${v}.${payload}.${flipped}`, key, 0)).toMatchObject({ ok: false, reason: 'bad-signature' });
  });

  it('call malformed input malformed, never throw', () => {
    for (const bad of ['', 'v1', 'v1..', 'v2.a.b', 'v1.a.b.c', 'x'.repeat(5000), 'v1.%%%.%%%']) {
      const check = verifyApproval(bad, key, 0);
      expect(check.ok, bad.slice(0, 20)).toBe(false);
    }
    // A correctly signed payload that is not a claim is malformed too.
    const payload = Buffer.from('{"r":1}').toString('base64url');
    const sig = createHmac('sha256', key).update(`v1.${payload}`).digest('base64url');
    expect(verifyApproval(`v1.${payload}.${sig}`, key, 0)).toMatchObject({ ok: false, reason: 'malformed' });
  });

  it('open for an approval whose timeout has a fraction of a millisecond (a day / 7), which once made every link "malformed"', () => {
    const now = 1_800_000_000_000;
    const timeoutMs = 86_400_000 / 7;
    const approval = requestApproval({ approvers: [claim.approver], timeoutMs });
    const request = approval.run({ request: 'drop old_rows' }, {} as never) as WaitRequest;
    const wait = waitRecordFor(request.spec, { step: 1, tool: approval.name, input: {}, at: now }, claim.waitId, now);
    // A whole millisecond, and not before its time.
    expect(Number.isInteger(wait.deadline)).toBe(true);
    expect(wait.deadline).toBeGreaterThanOrEqual(now + timeoutMs);
    const token = signApproval({ ...claim, expiresAt: wait.deadline }, key);
    expect(verifyApproval(token, key, now)).toMatchObject({ ok: true, claim: { expiresAt: wait.deadline } });
    // A link already emailed with such a deadline opens too, and expires at it.
    const sent = signApproval({ ...claim, expiresAt: now + timeoutMs }, key);
    expect(verifyApproval(sent, key, now)).toMatchObject({ ok: true, claim: { expiresAt: now + timeoutMs } });
    expect(verifyApproval(sent, key, now + timeoutMs)).toMatchObject({ ok: false, reason: 'expired' });
  });

  it('refuse a short key', () => {
    expect(() => signApproval(claim, randomBytes(16))).toThrow(/at least 32 bytes/);
  });
});
