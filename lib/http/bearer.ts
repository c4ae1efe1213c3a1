import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * The token of an `Authorization: Bearer <token>` header, or undefined for another scheme or none. The
 * scheme is read in any case, as HTTP's auth schemes are (RFC 9110 11.1): `bearer <token>`, which some
 * clients send, was refused 401 with the token right.
 */
export function bearerToken(header: string | undefined): string | undefined {
  // The rest of the header whole: STEPWISE_API_TOKEN may hold a space.
  return /^bearer +(.+)$/i.exec(header ?? '')?.[1];
}

/**
 * Whether a token given matches the one expected, in a time that says nothing of either: their SHA-256
 * digests are compared, always 32 bytes. Compared as they were, a length check came first, and the time
 * of an answer told a caller the length of a token an operator chose (`STEPWISE_API_TOKEN`).
 */
export function tokensMatch(given: string | undefined, expected: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(given ?? ''), digest(expected)) && given !== undefined;
}
