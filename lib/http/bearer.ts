/**
 * The token of an `Authorization: Bearer <token>` header, or undefined for another scheme or none. The
 * scheme is read in any case, as HTTP's auth schemes are (RFC 9110 11.1): `bearer <token>`, which some
 * clients send, was refused 401 with the token right.
 */
export function bearerToken(header: string | undefined): string | undefined {
  // The rest of the header whole: STEPWISE_API_TOKEN may hold a space.
  return /^bearer +(.+)$/i.exec(header ?? '')?.[1];
}
