import { createHmac, timingSafeEqual } from 'node:crypto';
import * as z from 'zod';
import { MIN_KEY_BYTES } from './signing-key.ts';

/**
 * Approval links carry a signed token, not a raw wait id: HMAC-SHA256 over the run, the wait, the
 * approver and the expiry, with a key only the deployment holds. Nothing is stored per token: a token
 * is valid while its signature checks, it has not expired and its wait is still the run's open wait, so
 * it is single use by construction (the first answer closes the wait) and bound to one approver.
 */

const VERSION = 'v1';
/** `e` may have a fraction: links were signed with a deadline that had one (a timeout such as a day / 7). */
const payloadSchema = z.object({ r: z.string().min(1), w: z.string().min(1), a: z.string().min(3), e: z.number().positive() }).strict();

export interface ApprovalClaim {
  runId: string;
  waitId: string;
  approver: string;
  /** Epoch ms after which the token is refused. */
  expiresAt: number;
}

export type TokenCheck =
  | { ok: true; claim: ApprovalClaim }
  | { ok: false; reason: 'malformed' | 'bad-signature' | 'expired'; message: string; claim?: ApprovalClaim };

export { MIN_KEY_BYTES };

export function signApproval(claim: ApprovalClaim, key: Buffer): string {
  assertKey(key);
  const payload = Buffer.from(JSON.stringify({ r: claim.runId, w: claim.waitId, a: claim.approver, e: claim.expiresAt })).toString('base64url');
  return `${VERSION}.${payload}.${mac(key, payload)}`;
}

/**
 * An approval link for a log line: the signature masked. The link is the approver's only credential, and
 * log lines reach collectors and people the approver is not; the run, wait and approver stay readable.
 */
export function maskedLink(link: string): string {
  return link.replace(/(\/approvals\/[^/.]+\.[^/.]+\.)[^/.?#]+$/, '$1***');
}

/** Checks `token` against each of `keys` (the signing key, then one a rotation replaced): one that signed it is enough. */
export function verifyApproval(token: string, keys: Buffer | readonly Buffer[], now: number): TokenCheck {
  const accepted = Buffer.isBuffer(keys) ? [keys] : keys;
  for (const key of accepted) assertKey(key);
  const parts = typeof token === 'string' && token.length < 4096 ? token.split('.') : [];
  if (parts.length !== 3 || parts[0] !== VERSION || !parts[1] || !parts[2]) return malformed();
  const [, payload, signature] = parts as [string, string, string];
  // Compared as issued, character for character: base64url decoding skips characters outside its
  // alphabet and the unused bits of the last one, so decoded bytes would accept altered links too.
  const given = Buffer.from(signature);
  const signed = accepted.some((key) => {
    const expected = Buffer.from(mac(key, payload));
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!signed) {
    return { ok: false, reason: 'bad-signature', message: 'this approval link is not valid: it was changed or was not issued by this deployment' };
  }
  let parsed: z.ZodSafeParseResult<z.infer<typeof payloadSchema>>;
  try {
    parsed = payloadSchema.safeParse(JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')));
  } catch {
    return malformed();
  }
  if (!parsed.success) return malformed();
  const claim = { runId: parsed.data.r, waitId: parsed.data.w, approver: parsed.data.a, expiresAt: parsed.data.e };
  if (now >= claim.expiresAt) {
    return { ok: false, reason: 'expired', message: `this approval link expired at ${new Date(claim.expiresAt).toISOString()}`, claim };
  }
  return { ok: true, claim };
}

function mac(key: Buffer, payload: string): string {
  return createHmac('sha256', key).update(`${VERSION}.${payload}`).digest('base64url');
}

/** What a link that is not a whole token is told: cut short, run on, or with more path after it. */
export const MALFORMED_LINK = 'this approval link is incomplete or malformed: open the link from the email exactly as it was sent';

function malformed(): TokenCheck {
  return { ok: false, reason: 'malformed', message: MALFORMED_LINK };
}

function assertKey(key: Buffer): void {
  if (key.length < MIN_KEY_BYTES) throw new Error(`the approval signing key must be at least ${MIN_KEY_BYTES} bytes`);
}
