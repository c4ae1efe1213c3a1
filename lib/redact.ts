/**
 * Keeps secrets out of what people and log collectors see. A base URL may carry `user:password@` or a
 * token in its query string (gateways often take one that way); neither belongs in a label or a log line.
 */

export const MASK = '***';
/** `scheme://user:password@` (or `user@`) anywhere in a text. */
const USERINFO = /([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"]+@/gi;
/** `user:password@host` without a scheme. */
const BARE_USERINFO = /(^|[\s"(])[^\s/?#@":]+:[^\s/?#@"]+@/g;
/** Query parameters whose name says they hold a secret. */
const SECRET_PARAM = /([?&][^=&\s"#]*(?:token|key|secret|password|passwd|pwd|sig|signature|auth|credential)[^=&\s"#]*=)[^&\s"#]+/gi;

/** A URL for display: user and password masked, every query value masked. */
export function redactUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return redactSecrets(text);
  }
  // "user:pass@host" without a scheme parses as scheme "user:" with an opaque path: not a URL to show.
  if (!url.host) return redactSecrets(text);
  if (url.username) url.username = MASK;
  if (url.password) url.password = MASK;
  for (const name of new Set(url.searchParams.keys())) url.searchParams.set(name, MASK);
  // URLSearchParams writes '*' as is; keep the rest of the text exactly as given when nothing was masked.
  return url.username || url.search ? url.toString() : text;
}

/** Masks credentials in URLs and secret-named query parameters anywhere in a text (a log line). */
export function redactSecrets(text: string): string {
  if (!text.includes('@') && !text.includes('=')) return text;
  return text
    .replace(USERINFO, `$1${MASK}@`)
    .replace(BARE_USERINFO, `$1${MASK}@`)
    .replace(SECRET_PARAM, `$1${MASK}`);
}
