import { InvalidInputError } from '../core/errors.ts';
import { PUBLIC_URL_ENV } from '../settings.ts';

/**
 * STEPWISE_PUBLIC_URL, checked: undefined when unset or empty (exported but unset: the default, as an empty
 * STEPWISE_OUTBOX is), else an absolute http(s) URL. Taken as it was, an empty one turned every approval
 * email off (no public URL configured), and one without its scheme (`localhost:8787`) was pasted in front of
 * every link, emailed as `localhost:8787/approvals/...`, which no mail client opens; nothing said so.
 */
export function publicUrlOf(env: NodeJS.ProcessEnv): string | undefined {
  const value = env[PUBLIC_URL_ENV]?.trim();
  if (!value) return undefined;
  let url: URL | undefined;
  try { url = new URL(value); } catch { url = undefined; }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.host) {
    throw new InvalidInputError(`${PUBLIC_URL_ENV} must be the http:// or https:// address approval links point at (stepwise serve's, http://127.0.0.1:8787 by default; on AWS the API's URL), got ${JSON.stringify(env[PUBLIC_URL_ENV])}`);
  }
  return value;
}
