/**
 * Keeps secrets out of what people and log collectors see. A base URL may carry `user:password@` or a
 * token in its query string (gateways often take one that way); neither belongs in a label or a log line.
 */

export const MASK = '***';
// A log line is JSON, where a line break or tab in a value is written `\n`, `\r`, `\t` and a quote `\"`: such
// an escape ends a user, password or query value, and a line break or tab starts a word as whitespace does.
// Read as part of the value, the rest of the line up to the next space went with it (`?token=abc\nretry 3`
// became `?token=*** 3`), and a `user:password@` at the start of a line was masked with the line before.
// Any other backslash (`\\`, a password's own) stays part of the value, and is masked with it.
const V = String.raw`(?:[^\s/?#@"\\]|\\[^nrt"])`;
/** `scheme://user:password@` (or `user@`) anywhere in a text. */
const USERINFO = new RegExp(String.raw`([a-z][a-z0-9+.-]*:\/\/)${V}+@`, 'gi');
/** `user:password@host` without a scheme. */
const BARE_USERINFO = new RegExp(String.raw`(^|[\s"(]|\\[nrt])(?:(?!:)${V})+:${V}+@`, 'g');
/** Query parameters whose name says they hold a secret. */
const SECRET_PARAM = /([?&][^=&\s"#\\]*(?:token|key|secret|password|passwd|pwd|sig|signature|auth|credential)[^=&\s"#\\]*=)(?:[^&\s"#\\]|\\[^nrt"])+/gi;

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
